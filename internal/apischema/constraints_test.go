package apischema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

type tagged struct {
	Slug  string   `json:"slug" schema:"required,pattern=slug"`
	Org   string   `json:"org,omitempty" schema:"pattern=slug"`
	Kind  string   `json:"kind,omitempty" schema:"enum=a|b"`
	Limit int64    `json:"limit,omitempty" schema:"minimum=1,maximum=10"`
	Note  string   `json:"note,omitempty" schema:"maxLength=4"`
	IDs   []string `json:"ids,omitempty" schema:"pattern=id"`
	Name  string   `json:"name,omitempty" schema:"pattern=name"`
	// Size is an update's "absent or set": a set 0 is held to the range.
	Size *int64 `json:"size,omitempty" schema:"minimum=1,maximum=8"`
	// Region is an update's optional string: a set "" breaks the pattern.
	Region *string `json:"region,omitempty" schema:"pattern=slug"`
	// Tags are a list with item counts, distinct items and a not= rule.
	Tags []string `json:"tags,omitempty" schema:"maxItems=2,uniqueItems,pattern=tag,not=reservedTag"`
	// Keys is an update's optional list: a set [] breaks minItems.
	Keys *[]string `json:"keys,omitempty" schema:"minItems=1,maxItems=2,pattern=fingerprint"`
	// Req is a required list with item counts.
	Req []string `json:"req,omitempty" schema:"required,minItems=1,maxItems=3"`
}

// TestCheckAgreesWithSchema: for each body, Check on the decoded value
// and the Request schema of the same type give the same verdict, and
// Check names the field and rule the tag declares.
func TestCheckAgreesWithSchema(t *testing.T) {
	raw, _ := json.Marshal(For(reflect.TypeFor[tagged](), Request))
	doc, err := jsonschema.UnmarshalJSON(bytesReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tagged.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("tagged.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body, field, rule string
	}{
		{"valid", `{"slug":"demo-harbor","org":"acme","kind":"a","limit":3,"note":"abcd","ids":["x.1"],"req":["r"]}`, "", ""},
		{"slug absent", `{"req":["r"]}`, "slug", "required"},
		{"slug empty", `{"slug":"","req":["r"]}`, "slug", "required"},
		{"slug upper", `{"slug":"Demo"}`, "slug", "pattern"},
		{"org bad", `{"req":["r"],"slug":"demo","org":"-x"}`, "org", "pattern"},
		{"enum", `{"req":["r"],"slug":"demo","kind":"c"}`, "kind", "enum"},
		{"below minimum", `{"req":["r"],"slug":"demo","limit":-1}`, "limit", "minimum"},
		{"above maximum", `{"req":["r"],"slug":"demo","limit":11}`, "limit", "maximum"},
		{"too long", `{"req":["r"],"slug":"demo","note":"abcde"}`, "note", "maxLength"},
		{"bad element", `{"req":["r"],"slug":"demo","ids":["ok","-no"]}`, "ids[1]", "pattern"},
		{"displayable name", `{"req":["r"],"slug":"demo","name":"Café Ünïcode 名前 🚢"}`, "", ""},
		{"name with a newline", `{"req":["r"],"slug":"demo","name":"a\nb"}`, "name", "pattern"},
		{"name with a bidi override", `{"req":["r"],"slug":"demo","name":"a\u202eb"}`, "name", "pattern"},
		{"name with a zero-width space", `{"req":["r"],"slug":"demo","name":"a\u200bb"}`, "name", "pattern"},
		{"name with a tag character", `{"req":["r"],"slug":"demo","name":"a\udb40\udc01b"}`, "name", "pattern"},
		{"name with U+FFFD", `{"req":["r"],"slug":"demo","name":"a\ufffdb"}`, "name", "pattern"},
		{"pointer set in range", `{"req":["r"],"slug":"demo","size":8,"region":"nyc3"}`, "", ""},
		{"pointer set to zero", `{"req":["r"],"slug":"demo","size":0}`, "size", "minimum"},
		{"pointer set above maximum", `{"req":["r"],"slug":"demo","size":9}`, "size", "maximum"},
		{"pointer set to an empty string", `{"req":["r"],"slug":"demo","region":""}`, "region", "pattern"},
		{"required list absent", `{"slug":"demo"}`, "req", "required"},
		{"required list empty", `{"slug":"demo","req":[]}`, "req", "minItems"},
		{"required list too long", `{"slug":"demo","req":["a","b","c","d"]}`, "req", "maxItems"},
		{"list at its bounds", `{"req":["r"],"slug":"demo","tags":["a","b"],"keys":["00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff"]}`, "", ""},
		{"list too long", `{"req":["r"],"slug":"demo","tags":["a","b","c"]}`, "tags", "maxItems"},
		{"list not distinct", `{"req":["r"],"slug":"demo","tags":["a","a"]}`, "tags", "uniqueItems"},
		{"item breaks the pattern", `{"req":["r"],"slug":"demo","tags":["a b"]}`, "tags[0]", "pattern"},
		{"item matches the not pattern", `{"req":["r"],"slug":"demo","tags":["ok","ChaLupa-x"]}`, "tags[1]", "not"},
		{"item near the not pattern", `{"req":["r"],"slug":"demo","tags":["chalup","x-chalupa"]}`, "", ""},
		{"pointer list set empty", `{"req":["r"],"slug":"demo","keys":[]}`, "keys", "minItems"},
		{"pointer list item bad", `{"req":["r"],"slug":"demo","keys":["AA"]}`, "keys[0]", "pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v tagged
			if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
				t.Fatal(err)
			}
			got := Check(&v)
			switch {
			case tc.field == "" && got != nil:
				t.Fatalf("Check refused %+v", *got)
			case tc.field != "" && (got == nil || got.Field != tc.field || got.Rule != tc.rule):
				t.Fatalf("Check = %+v; want %s %s", got, tc.field, tc.rule)
			}
			inst, _ := jsonschema.UnmarshalJSON(bytesReader([]byte(tc.body)))
			if err := sch.Validate(inst); (err == nil) != (tc.field == "") {
				t.Fatalf("schema verdict %v; Check's %+v", err, got)
			}
		})
	}
}

// TestNamePatternIsDisplayable: the name pattern refuses exactly the
// runes the daemon's rule names (docs/operations.md, "Customer
// organizations"): a control character, a bidi control, another
// invisible format character (Cf) or U+FFFD, checked over every Unicode
// scalar value with Go's own tables as the oracle.
func TestNamePatternIsDisplayable(t *testing.T) {
	re := compiled["name"]
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue // a surrogate: no string holds it
		}
		refused := r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.Is(unicode.Cf, r)
		if re.MatchString("a"+string(r)+"b") == refused {
			t.Fatalf("U+%04X: pattern match %v, rule refuses %v", r, !refused, refused)
		}
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// TestListMessages: a list's refusals name the field and its bounds,
// never a value.
func TestListMessages(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"slug":"demo"}`, "req is required: 1 to 3 items"},
		{`{"slug":"demo","req":[]}`, "req must have 1 to 3 items"},
		{`{"slug":"demo","req":["r"],"tags":["a","b","c"]}`, "tags must have at most 2 items"},
		{`{"slug":"demo","req":["r"],"tags":["a","a"]}`, "tags must be distinct"},
		{`{"slug":"demo","req":["r"],"tags":["chalupa-x"]}`, `tags[0] must not start with "chalupa": chalupa sets those tags itself`},
		{`{"slug":"demo","req":["r"],"keys":["AA"]}`, "keys[0] must be an MD5 fingerprint in lowercase colon-separated hex (aa:bb:…, 16 bytes)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			var v tagged
			if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
				t.Fatal(err)
			}
			if got := Check(&v); got == nil || got.Message() != tc.want {
				t.Fatalf("Check = %+v; want %q", got, tc.want)
			}
		})
	}
}

// BenchmarkCheck is Check on a valid body, what every signed request
// pays (docs/operations.md, "Signed ingest"): it should not allocate.
func BenchmarkCheck(b *testing.B) {
	size := int64(4)
	v := tagged{Slug: "demo-harbor", Org: "acme", Kind: "a", Limit: 3, Note: "abcd", IDs: []string{"x.1", "y.2"}, Name: "Café", Size: &size, Req: []string{"r"}}
	b.ReportAllocs()
	for b.Loop() {
		if bad := Check(&v); bad != nil {
			b.Fatal(bad.Message())
		}
	}
}
