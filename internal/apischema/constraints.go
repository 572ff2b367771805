package apischema

import (
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/chalupa-run/chalupa/internal/slug"
)

// Patterns are the named patterns a `schema:"pattern=NAME"` tag refers to:
// the very constants the handlers validated with before the tag existed
// (docs/operations.md, "OpenAPI"), so the document's pattern and the
// daemon's check are one string.
var Patterns = map[string]string{
	// slug: an environment or organization slug (internal/slug).
	"slug": slug.Pattern,
	// id: a deployment id or another caller-chosen id (internal/slug).
	"id": slug.IDPattern,
	// commit: a git object id, SHA-1 or SHA-256, as ingest's run reports
	// take it.
	"commit": `^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$`,
	// name: a display name an operator's terminal prints safely
	// (docs/operations.md, "Customer organizations"): no control
	// character (Cc: NUL, ESC, newline, DEL, C1), no invisible format
	// character (Cf, which holds every bidi control, U+202E and kin, and
	// the zero-width space, soft hyphen and BOM), and no U+FFFD, which is
	// what encoding/json makes of invalid UTF-8 in a request. U+FFFD is
	// written as itself: Go's regexp has no \u escape and ECMA-262's
	// \u{…} is not Go's, while a literal character reads the same in both.
	// The Unicode version of Cf is the reader's; the daemon's is Go's.
	"name": `^[^\p{Cc}\p{Cf}` + "\uFFFD" + `]*$`,
	// service: a log session's service, a systemd unit name or a file
	// label (protocol.ValidService reads this entry).
	"service": `^[A-Za-z0-9@._:-]{1,128}$`,
	// sha256: a log chunk's SHA-256, 64 lowercase hex digits.
	"sha256": `^[0-9a-f]{64}$`,
	// region, size, image: a box's DigitalOcean slugs (docs/operations.md,
	// "Boxes"; boxes.Validate reads these entries). An image may also be
	// a numeric image id, which the image pattern admits.
	"region": `^[a-z]{3}[0-9]$`,
	"size":   `^[a-z0-9][a-z0-9-]{0,63}$`,
	"image":  `^[a-z0-9][a-z0-9._-]{0,63}$`,
	// fingerprint: an SSH key's MD5 fingerprint as DigitalOcean names
	// keys, 16 lowercase hex bytes joined by colons.
	"fingerprint": `^([0-9a-f]{2}:){15}[0-9a-f]{2}$`,
	// tag: a box's declared tag, DigitalOcean's tag characters.
	"tag": `^[A-Za-z0-9_:-]{1,64}$`,
	// reservedTag: a tag the converge program sets itself, "chalupa" in
	// any case at the start (boxes.ReservedTagPrefix); a `not=` rule.
	"reservedTag": `^[Cc][Hh][Aa][Ll][Uu][Pp][Aa]`,
	// ipv4Host: an IPv4 /32 in canonical form (no leading zero, no
	// space), what net/netip parses and prints back unchanged.
	"ipv4Host": `^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/32$`,
	// nonUnicastHost: an ipv4Host that is not a unicast address in
	// net/netip's sense (IsGlobalUnicast false: unspecified, broadcast,
	// loopback, link-local, multicast); a `not=` rule beside ipv4Host.
	"nonUnicastHost": `^(?:0\.0\.0\.0/|255\.255\.255\.255/|127\.|169\.254\.|22[4-9]\.|23[0-9]\.)`,
	// duration: a Go duration as time.ParseDuration reads it ("2h",
	// "1h30m", "1.5s", "0"): a sign, then "0" or numbers each with a
	// unit. ParseDuration alone refuses an amount that overflows.
	"duration": `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`,
	// providerToken: a DigitalOcean token, 1-512 printable ASCII
	// characters without spaces (ingest.ValidProviderToken reads this
	// entry).
	"providerToken": `^[!-~]{1,512}$`,
	// password: the console password's characters: no C0 control
	// character and no DEL (adminapi.CheckPassword; its length rules are
	// minLength and the handler's byte bound).
	"password": `^[^\x00-\x1f\x7f]*$`,
	// hex64: a run artifact's SHA-256, 64 hex digits of either case
	// (ingest lower-cases it).
	"hex64": `^[0-9a-fA-F]{64}$`,
	// label: a provider slug a heartbeat or lifecycle event names its
	// droplet's region and size by.
	"label": `^[a-z0-9][a-z0-9._-]{0,63}$`,
	// version: a heartbeat's agentVersion, 1-64 printable ASCII
	// characters (shown in an operator's terminal).
	"version": `^[ -~]{1,64}$`,
	// suite: a run report's suite.
	"suite": `^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$`,
	// artifactName: a run artifact's name, 1-255 printable ASCII
	// characters without a space at either end.
	"artifactName": `^[!-~](?:[ -~]{0,253}[!-~])?$`,
	// mediaType: a run artifact's media type, type/subtype.
	"mediaType": `^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$`,
	// localId: a `local` artifact locator's id, a lower-case name on the
	// reporting machine, never a path: [a-z0-9._-] starting with a letter
	// or digit, no ".." (each dot followed by another character or the
	// end); its tag's maxLength says 128, exact as the pattern is ASCII.
	"localId": `^[a-z0-9](?:\.?[a-z0-9_-])*\.?$`,
	// httpsURL: an `https` artifact locator's url as far as a pattern can
	// say: "https://" and printable ASCII without space or backslash.
	// Only ASCII, so its maxLength counts bytes as the daemon does; the
	// host, userinfo, fragment and credential rules are ingest's own.
	"httpsURL": `^https://[!-\[\]-~]+$`,
	// month: a calendar month as YYYY-MM, exactly what time.Parse
	// accepts with the layout "2006-01" (the costs report's month).
	"month": `^[0-9]{4}-(?:0[1-9]|1[0-2])$`,
	// decimal: a whole number 0 or more written in decimal digits (a log
	// chunk's seq in a path).
	"decimal": `^[0-9]+$`,
}

// patternWords say what each of Patterns asks, after the field's name, in
// the refusal Violation.Message writes.
var patternWords = map[string]string{
	"slug":        "must match " + slug.Pattern,
	"id":          "must be 1-128 characters of [A-Za-z0-9._:-]",
	"commit":      "must be a 40- or 64-digit hex object id",
	"name":        "must be valid UTF-8 without control, bidi or invisible format characters",
	"service":     "must be 1-128 characters of [A-Za-z0-9@._:-]",
	"sha256":      "must be 64 lowercase hex digits",
	"region":      "must be a DigitalOcean region slug such as nyc3",
	"size":        "must be a DigitalOcean size slug such as s-2vcpu-4gb",
	"image":       "must be a DigitalOcean image slug or id such as ubuntu-24-04-x64",
	"fingerprint": "must be an MD5 fingerprint in lowercase colon-separated hex (aa:bb:…, 16 bytes)",
	"tag":         "must match ^[A-Za-z0-9_:-]{1,64}$",
	// A `not=` pattern's words say what the value must not be.
	"reservedTag":    "must not start with \"chalupa\": chalupa sets those tags itself",
	"ipv4Host":       "must be an IPv4 /32 such as 203.0.113.7/32",
	"nonUnicastHost": "must be a unicast address (not loopback, link-local, multicast or unspecified)",
	"duration":       "must be a duration such as 2h or 30m",
	"providerToken":  "must be 1-512 printable ASCII characters without spaces",
	"password":       "must not hold control characters",
	"hex64":          "must be 64 hex digits",
	"label":          "must be a provider slug: 1-64 characters of [a-z0-9._-]",
	"version":        "must be 1-64 printable ASCII characters",
	"suite":          "must be 1-128 characters of [A-Za-z0-9._/:-]",
	"artifactName":   "must be 1-255 printable ASCII characters without surrounding spaces",
	"mediaType":      "must be type/subtype",
	"localId":        "must be characters of [a-z0-9._-] starting with a letter or digit, without \"..\"",
	"httpsURL":       "must be an https URL of printable ASCII",
	"month":          "must be a month as YYYY-MM",
	"decimal":        "must be a whole number in decimal digits",
}

// compiled holds Patterns compiled once, at package start: every name is a
// constant of this file.
var compiled = func() map[string]*regexp.Regexp {
	m := make(map[string]*regexp.Regexp, len(Patterns))
	for name, p := range Patterns {
		m[name] = regexp.MustCompile(p)
	}
	return m
}()

// Rules are the constraints a wire type's field declares in its `schema`
// tag, comma-separated: required, pattern=NAME (one of Patterns),
// not=NAME (a pattern the value must not match), minLength=N
// (characters), maxLength=N (bytes), minimum=N, maximum=N (an integer, or
// a decimal such as 0.5 or 1e6 for a float field), enum=a|b|c, and on a
// list minItems=N, maxItems=N and uniqueItems (the other rules of a list
// constrain each item). A request
// schema carries them (JSON Schema's keywords of the same names) and
// Check enforces them, so the two cannot disagree.
type Rules struct {
	// Required: the key must be present and not its zero value (an empty
	// string, 0, false: the daemon cannot tell absent from zero); a list
	// must be present (null is absent), and may be empty unless MinItems
	// says otherwise.
	Required bool
	// Pattern is the name of the field's pattern in Patterns; "" for none.
	Pattern string
	// MaxLength bounds a string's length in bytes; 0 for no bound.
	MaxLength int
	// MinLength bounds a string's length from below in characters
	// (Unicode code points, as JSON Schema's minLength counts them and
	// utf8.RuneCountInString does on a decoded string); 0 for no bound.
	MinLength int
	// Minimum and Maximum bound an integer; nil for no bound.
	Minimum, Maximum *int64
	// MinFloat and MaxFloat bound a number: the same bounds as Minimum
	// and Maximum when those are integers, or a decimal one a float
	// field declares; nil for no bound.
	MinFloat, MaxFloat *float64
	// Enum lists the values a string may take; nil for any.
	Enum []string
	// Not is the name of a pattern in Patterns the string must not match
	// (JSON Schema's "not": {"pattern": …}); "" for none.
	Not string
	// MinItems and MaxItems bound a list's length; 0 for no bound.
	MinItems, MaxItems int
	// UniqueItems: a list's items are distinct.
	UniqueItems bool
	// Object (`schema:"object"`) says that a json.RawMessage field always
	// holds a JSON object: its schema is {"type": "object"} instead of
	// the keywordless schema that admits any value, which MCP clients
	// mapping tool schemas onto a typed dialect cannot use
	// (docs/operations.md, "MCP server").
	Object bool
}

// RulesOf parses a field's `schema` tag. It panics on a tag it cannot
// read or a pattern name Patterns lacks: a programming mistake that every
// test touching the type finds.
func RulesOf(tag reflect.StructTag) Rules {
	var r Rules
	for _, part := range strings.Split(tag.Get("schema"), ",") {
		key, val, _ := strings.Cut(part, "=")
		switch key {
		case "":
		case "required":
			r.Required = true
		case "pattern":
			r.Pattern = mustPattern(val)
		case "maxLength":
			r.MaxLength = mustInt[int](val)
		case "minLength":
			r.MinLength = mustInt[int](val)
		case "minimum":
			r.Minimum, r.MinFloat = mustNumber(val)
		case "maximum":
			r.Maximum, r.MaxFloat = mustNumber(val)
		case "enum":
			r.Enum = strings.Split(val, "|")
		case "not":
			r.Not = mustPattern(val)
		case "minItems":
			r.MinItems = mustInt[int](val)
		case "maxItems":
			r.MaxItems = mustInt[int](val)
		case "uniqueItems":
			r.UniqueItems = true
		case "object":
			r.Object = true
		default:
			panic("apischema: unknown schema rule " + key)
		}
	}
	return r
}

// mustPattern is name when Patterns has it; it panics otherwise, as RulesOf
// does on any tag it cannot read.
func mustPattern(name string) string {
	if _, ok := Patterns[name]; !ok {
		panic("apischema: unknown pattern " + name)
	}
	return name
}

func mustInt[T int | int64](s string) T {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic("apischema: schema rule wants an integer, got " + s)
	}
	return T(n)
}

// mustNumber parses a bound: an integer sets both results, a decimal
// (0.5, -50, 1e6 written with an exponent) the float one alone.
func mustNumber(s string) (*int64, *float64) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		panic("apischema: schema rule wants a number, got " + s)
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return &n, &f
	}
	return nil, &f
}

// formatFloat writes a decimal bound as JSON and a message say it:
// shortest, without an exponent (1e6 is 1000000).
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// apply adds r's keywords to s, a property's schema.
func (r Rules) apply(s Schema) {
	if r.Pattern != "" {
		s["pattern"] = Patterns[r.Pattern]
	}
	if r.MaxLength > 0 {
		s["maxLength"] = r.MaxLength
	}
	if r.MinLength > 0 {
		s["minLength"] = r.MinLength
	}
	if r.Required && s["type"] == "string" && r.Pattern == "" && r.Enum == nil && s["minLength"] == nil {
		// An empty string is refused like an absent key (a pattern or an
		// enum already refuses it).
		s["minLength"] = 1
	}
	if r.Minimum != nil {
		s["minimum"] = *r.Minimum
	} else if r.MinFloat != nil {
		s["minimum"] = *r.MinFloat
	}
	if r.Maximum != nil {
		s["maximum"] = *r.Maximum
	} else if r.MaxFloat != nil {
		s["maximum"] = *r.MaxFloat
	}
	if r.Enum != nil {
		s["enum"] = r.Enum
	}
	if r.Not != "" {
		s["not"] = Schema{"pattern": Patterns[r.Not]}
	}
}

// items are r's rules for each item of a list: the list's own (required
// and the item counts) left out.
func (r Rules) items() Rules {
	r.Required, r.MinItems, r.MaxItems, r.UniqueItems = false, 0, 0, false
	return r
}

// Apply adds r's keywords to s, the schema of a value that is not a body
// field (a path or query parameter, docs/operations.md, "OpenAPI").
func (r Rules) Apply(s Schema) { r.apply(s) }

// CheckValue is Check's rule for one value outside a body (a path or
// query parameter, read into v): nil when v holds to r. A zero v is
// absent, refused only when r is required. name is the Violation's Field.
func (r Rules) CheckValue(v reflect.Value, name string) *Violation {
	bad := r.violation(v)
	if bad != nil {
		bad.Field = name + bad.Field // bad.Field is "" or an element's "[i]"
	}
	return bad
}

// Violation is the first rule a value breaks: the field's JSON key (a
// dotted path inside nested objects), the rule (required, pattern, not,
// minLength, maxLength, minimum, maximum, enum, minItems, maxItems,
// uniqueItems) and, for a pattern, its name.
type Violation struct {
	Field, Rule, Pattern string
	// Rules are the field's rules, for Message.
	Rules Rules
}

// Message is the refusal's words: the field's key and what its rule asks
// ("environmentSlug must match ^[a-z0-9]…", "reaper.limitMinutes must be
// between 1 and 10080"); never the value sent.
func (v *Violation) Message() string {
	r := v.Rules
	switch {
	case v.Rule == "not":
		return v.Field + " " + patternWords[r.Not]
	case v.Rule == "required" && r.MinItems > 0:
		return v.Field + " is required: " + itemCount(r)
	case v.Rule == "required" && r.MaxItems > 0:
		// A required list is present; it may be empty.
		return v.Field + " is required (an empty array when there are none)"
	case v.Rule == "minItems" || v.Rule == "maxItems":
		return v.Field + " must have " + itemCount(r)
	case v.Rule == "uniqueItems":
		return v.Field + " must be distinct"
	case v.Rule == "minLength":
		return v.Field + " must be at least " + strconv.Itoa(r.MinLength) + " characters"
	case r.Pattern != "":
		// An empty string breaks the pattern too: one message for both.
		return v.Field + " " + patternWords[r.Pattern]
	case r.Minimum != nil && r.Maximum != nil && *r.Minimum == *r.Maximum:
		// One value allowed: "windowSeconds must be 60".
		return v.Field + " must be " + strconv.FormatInt(*r.Minimum, 10)
	case r.Minimum != nil && r.Maximum != nil:
		return v.Field + " must be between " + strconv.FormatInt(*r.Minimum, 10) + " and " + strconv.FormatInt(*r.Maximum, 10)
	case r.Enum != nil:
		return v.Field + " must be one of " + strings.Join(r.Enum, ", ")
	case r.MinFloat != nil && r.MaxFloat != nil:
		return v.Field + " must be between " + formatFloat(*r.MinFloat) + " and " + formatFloat(*r.MaxFloat)
	case v.Rule == "required":
		return v.Field + " is required"
	case v.Rule == "maxLength":
		return v.Field + " must be at most " + strconv.Itoa(r.MaxLength) + " bytes"
	case v.Rule == "minimum" && r.Minimum != nil:
		return v.Field + " must be at least " + strconv.FormatInt(*r.Minimum, 10)
	case v.Rule == "minimum":
		return v.Field + " must be at least " + formatFloat(*r.MinFloat)
	case r.Maximum != nil:
		return v.Field + " must be at most " + strconv.FormatInt(*r.Maximum, 10)
	default:
		return v.Field + " must be at most " + formatFloat(*r.MaxFloat)
	}
}

// itemCount says a list's bounds: "1 to 10 items", "at most 20 items".
func itemCount(r Rules) string {
	switch {
	case r.MinItems > 0 && r.MaxItems > 0:
		return strconv.Itoa(r.MinItems) + " to " + strconv.Itoa(r.MaxItems) + " items"
	case r.MaxItems > 0:
		return "at most " + strconv.Itoa(r.MaxItems) + " items"
	default:
		return "at least " + strconv.Itoa(r.MinItems) + " items"
	}
}

// Check returns the first field of v, a request value (a struct or a
// pointer to one), that breaks a rule of its `schema` tag, in declaration
// order, descending into nested structs, pointers and slices; nil when
// every rule holds. It never fails for a type without tags.
//
// Check runs on every signed request (docs/operations.md, "Signed ingest"): it
// reads each type's tags once (planFor) and allocates only for the
// violation it returns.
func Check(v any) *Violation {
	return check(reflect.ValueOf(v))
}

// check is Check of v; the violation's Field is relative to v ("" for v
// itself, "[2]" for an element, "reaper.limitMinutes" for a nested field).
func check(v reflect.Value) *Violation {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	switch {
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		if !planFor(v.Type().Elem()).ruled {
			return nil
		}
		for i := range v.Len() {
			if bad := check(v.Index(i)); bad != nil {
				bad.Field = joinField("["+strconv.Itoa(i)+"]", bad.Field)
				return bad
			}
		}
		return nil
	case v.Kind() != reflect.Struct:
		return nil
	}
	for _, f := range planFor(v.Type()).fields {
		fv, err := v.FieldByIndexErr(f.Index)
		if err != nil {
			continue // inside a nil embedded pointer: absent
		}
		bad := (*Violation)(nil)
		if f.ruled {
			bad = f.Rules.violation(fv)
		}
		if bad == nil && f.deep {
			bad = check(fv)
		}
		if bad != nil {
			bad.Field = joinField(f.Name, bad.Field)
			return bad
		}
	}
	return nil
}

// joinField is the path of rest inside the field or element name.
func joinField(name, rest string) string {
	switch {
	case rest == "":
		return name
	case rest[0] == '[':
		return name + rest
	}
	return name + "." + rest
}

// typePlan is what Check needs of a type, read once from its tags.
type typePlan struct {
	// fields are a struct type's JSON fields (nil for another kind).
	fields []planField
	// ruled is true when a value of the type (a struct's field at any
	// depth, or an element) carries a rule: Check skips it otherwise.
	ruled bool
}

// planField is one field of a struct type's plan.
type planField struct {
	Field
	// ruled: the field's own tag declares a rule.
	ruled bool
	// deep: the field's type holds ruled fields or elements.
	deep bool
}

// plans caches planFor's answers by reflect.Type; types are few and
// fixed (the wire types), so the cache is never trimmed.
var plans sync.Map

// planFor is t's plan, built on first use. A recursive type is planned
// as ruled while it is being built, which at worst makes Check descend
// into a value that holds no rule.
func planFor(t reflect.Type) *typePlan {
	if p, ok := plans.Load(t); ok {
		return p.(*typePlan)
	}
	return buildPlan(t, map[reflect.Type]bool{})
}

func buildPlan(t reflect.Type, building map[reflect.Type]bool) *typePlan {
	if p, ok := plans.Load(t); ok {
		return p.(*typePlan)
	}
	if building[t] {
		return &typePlan{ruled: true}
	}
	building[t] = true
	defer delete(building, t)
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	p := &typePlan{}
	switch {
	case base.Kind() == reflect.Slice || base.Kind() == reflect.Array:
		p.ruled = buildPlan(base.Elem(), building).ruled
	case base.Kind() == reflect.Struct && base != timeType:
		for _, f := range Fields(base) {
			pf := planField{Field: f, ruled: !reflect.ValueOf(f.Rules).IsZero()}
			pf.deep = buildPlan(f.Type, building).ruled
			p.ruled = p.ruled || pf.ruled || pf.deep
			p.fields = append(p.fields, pf)
		}
	}
	actual, _ := plans.LoadOrStore(t, p)
	return actual.(*typePlan)
}

// violation checks one field's value against r. A pointer field (an
// update body's "absent or set") is absent when nil: only required
// refuses it; when set, its value is held to the rules even when it is the
// zero value, which a set pointer tells apart from absent.
func (r Rules) violation(v reflect.Value) *Violation {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			if r.Required {
				return &Violation{Rule: "required", Pattern: r.Pattern, Rules: r}
			}
			return nil
		}
		return r.valueViolation(v.Elem())
	}
	if v.IsZero() {
		if r.Required {
			return &Violation{Rule: "required", Pattern: r.Pattern, Rules: r}
		}
		return nil
	}
	return r.valueViolation(v)
}

// valueViolation checks a present value against r's pattern, length,
// range and enum.
func (r Rules) valueViolation(v reflect.Value) *Violation {
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		// The item counts hold the list; the other rules of a tag on a
		// slice constrain each element, as the schema's items.
		if r.MinItems > 0 && v.Len() < r.MinItems {
			return &Violation{Rule: "minItems", Rules: r}
		}
		if r.MaxItems > 0 && v.Len() > r.MaxItems {
			return &Violation{Rule: "maxItems", Rules: r}
		}
		if r.UniqueItems && !distinct(v) {
			return &Violation{Rule: "uniqueItems", Rules: r}
		}
		// An element is present even when it is its zero value (an ""
		// item breaks a pattern that wants a character); only a nil
		// pointer element is absent.
		elem := r.items()
		for i := range v.Len() {
			ev := v.Index(i)
			var bad *Violation
			if ev.Kind() == reflect.Pointer {
				bad = elem.violation(ev)
			} else {
				bad = elem.valueViolation(ev)
			}
			if bad != nil {
				bad.Field = "[" + strconv.Itoa(i) + "]"
				return bad
			}
		}
	case reflect.String:
		s := v.String()
		if r.Pattern != "" && !compiled[r.Pattern].MatchString(s) {
			return &Violation{Rule: "pattern", Pattern: r.Pattern, Rules: r}
		}
		if r.Not != "" && compiled[r.Not].MatchString(s) {
			return &Violation{Rule: "not", Pattern: r.Not, Rules: r}
		}
		if r.MaxLength > 0 && len(s) > r.MaxLength {
			return &Violation{Rule: "maxLength", Rules: r}
		}
		if r.MinLength > 0 && utf8.RuneCountInString(s) < r.MinLength {
			return &Violation{Rule: "minLength", Rules: r}
		}
		if r.Enum != nil {
			for _, e := range r.Enum {
				if s == e {
					return nil
				}
			}
			return &Violation{Rule: "enum", Rules: r}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := v.Int()
		if r.Minimum != nil && n < *r.Minimum {
			return &Violation{Rule: "minimum", Rules: r}
		}
		if r.Maximum != nil && n > *r.Maximum {
			return &Violation{Rule: "maximum", Rules: r}
		}
		// A decimal bound on an integer field holds as a number.
		if r.Minimum == nil && r.MinFloat != nil && float64(n) < *r.MinFloat {
			return &Violation{Rule: "minimum", Rules: r}
		}
		if r.Maximum == nil && r.MaxFloat != nil && float64(n) > *r.MaxFloat {
			return &Violation{Rule: "maximum", Rules: r}
		}
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if r.MinFloat != nil && f < *r.MinFloat {
			return &Violation{Rule: "minimum", Rules: r}
		}
		if r.MaxFloat != nil && f > *r.MaxFloat {
			return &Violation{Rule: "maximum", Rules: r}
		}
	}
	return nil
}

// distinct reports whether list v's items differ from each other, compared
// as their Go values (JSON Schema's uniqueItems on the decoded strings or
// numbers; an item that cannot be a map key, a list or an object, is never
// held equal to another: uniqueItems is declared on lists of scalars).
func distinct(v reflect.Value) bool {
	seen := make(map[any]bool, v.Len())
	for i := range v.Len() {
		item := v.Index(i)
		if !item.Comparable() || (item.Kind() == reflect.Pointer || item.Kind() == reflect.Interface) {
			continue
		}
		k := item.Interface()
		if seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}
