package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// errStrictShape means the bytes did not look like the value encoding/json
// had just decoded from them: checkStrictKeys's precondition was broken.
var errStrictShape = errors.New("strict key check: JSON does not match the decoded type")

// maxSmallKeys is how many keys of a map or interface object are compared
// pairwise for duplicates before a set takes over.
const maxSmallKeys = 8

// scanner walks the first JSON value of b, known to be well formed, in one
// pass and without allocating (see checkStrictKeys). i is the next byte.
type scanner struct {
	b []byte
	i int
}

// peek skips white space and returns the next byte, 0 at the end.
func (s *scanner) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// value walks one JSON value of shape sh.
func (s *scanner) value(sh *shape) error {
	switch sh.kind {
	case shapeLeaf:
		return s.skip()
	case shapeAny:
		return s.anyValue()
	}
	switch c := s.peek(); {
	case c == 'n': // null is accepted anywhere
		return s.skip()
	case c == '[' && sh.kind == shapeList:
		s.i++
		return s.list(sh.elem)
	case c == '{' && sh.kind == shapeStruct:
		s.i++
		return s.structObject(sh)
	case c == '{' && sh.kind == shapeMap:
		s.i++
		return s.keyedObject(sh.elem)
	}
	return errStrictShape
}

// anyValue walks one JSON value of any shape (an interface field): its
// objects may hold any keys, each at most once.
func (s *scanner) anyValue() error {
	switch s.peek() {
	case '{':
		s.i++
		return s.keyedObject(anyShape)
	case '[':
		s.i++
		return s.list(anyShape)
	}
	return s.skip()
}

// list walks the elements of an array (its '[' already read) through its ']'.
func (s *scanner) list(elem *shape) error {
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := s.value(elem); err != nil {
			return err
		}
		if done, err := s.next(']'); done || err != nil {
			return err
		}
	}
}

// next reads the ',' between members or the closing byte; done reports the
// closing byte.
func (s *scanner) next(closing byte) (done bool, err error) {
	switch s.peek() {
	case ',':
		s.i++
		return false, nil
	case closing:
		s.i++
		return true, nil
	}
	return false, errStrictShape
}

// structObject walks the members of an object (its '{' already read) whose
// keys must be sh's field names, each at most once, through its '}'.
func (s *scanner) structObject(sh *shape) error {
	var small [1]uint64 // seen fields, by index; enough for 64 fields
	seen := small[:]
	if n := len(sh.fields); n > 64 {
		seen = make([]uint64, (n+63)/64)
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.key()
		if err != nil {
			return err
		}
		i, ok := sh.names[string(key)]
		if !ok {
			return &strictKeyError{Key: string(key)}
		}
		if seen[i/64]&(1<<(i%64)) != 0 {
			return &strictKeyError{Key: string(key), Duplicate: true}
		}
		seen[i/64] |= 1 << (i % 64)
		if err := s.value(sh.fields[i]); err != nil {
			return err
		}
		if done, err := s.next('}'); done || err != nil {
			return err
		}
	}
}

// keyedObject walks the members of an object (its '{' already read) that
// may have any keys, each at most once, and values of shape elem, through
// its '}'.
func (s *scanner) keyedObject(elem *shape) error {
	var small [maxSmallKeys][]byte
	seen := small[:0]
	var many map[string]struct{} // once seen outgrows small
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.key()
		if err != nil {
			return err
		}
		if many != nil {
			if _, dup := many[string(key)]; dup {
				return &strictKeyError{Key: string(key), Duplicate: true}
			}
			many[string(key)] = struct{}{}
		} else {
			for _, k := range seen {
				if bytes.Equal(k, key) {
					return &strictKeyError{Key: string(key), Duplicate: true}
				}
			}
			if len(seen) < len(small) {
				seen = append(seen, key)
			} else {
				many = make(map[string]struct{}, 2*len(small))
				for _, k := range seen {
					many[string(k)] = struct{}{}
				}
				many[string(key)] = struct{}{}
			}
		}
		if err := s.value(elem); err != nil {
			return err
		}
		if done, err := s.next('}'); done || err != nil {
			return err
		}
	}
}

// key reads an object key and the ':' after it, and returns the key as
// encoding/json reads it: the raw bytes (no copy) when they hold no escape
// and are valid UTF-8, else the string encoding/json unquotes (escapes
// resolved, invalid UTF-8 replaced by U+FFFD), so that "a\u0062" and "ab"
// are the same key here as they are to the decoder.
func (s *scanner) key() ([]byte, error) {
	if s.peek() != '"' {
		return nil, errStrictShape
	}
	start := s.i
	end, escaped, nonASCII := s.stringEnd(start)
	if end < 0 {
		return nil, errStrictShape
	}
	s.i = end
	raw := s.b[start+1 : end-1]
	if escaped || (nonASCII && !utf8.Valid(raw)) {
		var k string
		if err := json.Unmarshal(s.b[start:end], &k); err != nil {
			return nil, errStrictShape
		}
		raw = []byte(k)
	}
	if s.peek() != ':' {
		return nil, errStrictShape
	}
	s.i++
	return raw, nil
}

// stringEnd returns the index just past the closing quote of the string
// whose opening quote is at start (-1 when it does not end), and whether it
// holds an escape or a byte outside ASCII.
func (s *scanner) stringEnd(start int) (end int, escaped, nonASCII bool) {
	for j := start + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			return j + 1, escaped, nonASCII
		case c == '\\':
			escaped = true
			j++
		case c >= utf8.RuneSelf:
			nonASCII = true
		}
	}
	return -1, escaped, nonASCII
}

// skip steps over one JSON value unread.
func (s *scanner) skip() error {
	switch c := s.peek(); c {
	case 0:
		return errStrictShape
	case '"':
		end, _, _ := s.stringEnd(s.i)
		if end < 0 {
			return errStrictShape
		}
		s.i = end
		return nil
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				end, _, _ := s.stringEnd(s.i)
				if end < 0 {
					return errStrictShape
				}
				s.i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return nil
				}
			}
			s.i++
		}
		return errStrictShape
	default: // a number, true, false or null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return nil
			}
			s.i++
		}
		return nil
	}
}
