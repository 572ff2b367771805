// Package envelope seals secrets at rest with AES-256-GCM under chalupa's
// master key (CHALUPA_INGEST_MASTER_KEY). Every stored ingest key and
// provider token is such an envelope (docs/operations.md, "Master key and
// envelopes").
//
// An envelope is self-describing:
//
//	magic "CE" | format 0x01 | master-key version (uint32, big endian) | nonce (12) | ciphertext+tag
//
// The header and the caller's additional data (the row's identity, e.g. the
// key id) are both authenticated: an envelope copied onto another row, or one
// whose version byte was altered, fails to open. The nonce is random (96 bits);
// NIST SP 800-38D §8.3 bounds random-nonce use to 2^32 seals per key, far
// beyond a control plane's key count, and rewrap moves to a fresh key anyway.
package envelope

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes, in bytes.
const (
	// KeySize is the master key length (AES-256).
	KeySize = 32
	// headerSize is magic(2) + format(1) + version(4).
	headerSize = 7
	nonceSize  = 12
	tagSize    = 16
	// Overhead is how many bytes an envelope adds to its plaintext.
	Overhead = headerSize + nonceSize + tagSize
)

const formatV1 = 0x01

var magic = [2]byte{'C', 'E'}

// Errors. Open never says which check failed: a wrong key, a tampered byte
// and a moved envelope are the same failure to a caller.
var (
	// ErrOpen is returned when an envelope does not authenticate.
	ErrOpen = errors.New("envelope: cannot open (wrong master key, tampered, or moved)")
	// ErrMalformed is returned for bytes that are not an envelope at all.
	ErrMalformed = errors.New("envelope: malformed")
	// ErrKeySize is returned by New for a key that is not KeySize bytes.
	ErrKeySize = errors.New("envelope: master key must be 32 bytes")
)

// Sealer seals and opens envelopes under one master key of a known version.
// It is safe for concurrent use.
type Sealer struct {
	aead    cipher.AEAD
	version uint32
}

// New returns a Sealer for key (KeySize bytes) at master-key version
// (1 for the first key, incremented by every rewrap). Errors: ErrKeySize.
func New(key []byte, version uint32) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, ErrKeySize
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return &Sealer{aead: aead, version: version}, nil
}

// Version is the master-key version this Sealer writes.
func (s *Sealer) Version() uint32 { return s.version }

// Seal encrypts plaintext bound to aad (the row identity: never empty in
// chalupa, so an envelope cannot be replayed onto another row).
func (s *Sealer) Seal(plaintext, aad []byte) []byte {
	out := make([]byte, headerSize+nonceSize, Overhead+len(plaintext))
	copy(out, magic[:])
	out[2] = formatV1
	binary.BigEndian.PutUint32(out[3:7], s.version)
	_, _ = rand.Read(out[headerSize : headerSize+nonceSize]) // crypto/rand.Read never fails (Go 1.24+)
	return s.aead.Seal(out, out[headerSize:headerSize+nonceSize], plaintext, additional(out[:headerSize], aad))
}

// Open authenticates and decrypts env bound to aad. Errors: ErrMalformed,
// ErrOpen (including an envelope sealed under another master-key version).
func (s *Sealer) Open(env, aad []byte) ([]byte, error) {
	v, err := Version(env)
	if err != nil {
		return nil, err
	}
	if v != s.version {
		return nil, ErrOpen
	}
	nonce := env[headerSize : headerSize+nonceSize]
	pt, err := s.aead.Open(nil, nonce, env[headerSize+nonceSize:], additional(env[:headerSize], aad))
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// Version returns the master-key version recorded in env's header.
// Errors: ErrMalformed.
func Version(env []byte) (uint32, error) {
	if len(env) < Overhead || env[0] != magic[0] || env[1] != magic[1] || env[2] != formatV1 {
		return 0, ErrMalformed
	}
	return binary.BigEndian.Uint32(env[3:7]), nil
}

// additional is the authenticated data: the header followed by the caller's
// aad, length-prefixed so that no two (header, aad) pairs serialize alike.
func additional(header, aad []byte) []byte {
	b := make([]byte, 0, len(header)+4+len(aad))
	b = append(b, header...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(aad)))
	return append(b, aad...)
}
