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
		{"valid", `{"slug":"demo-harbor","org":"acme","kind":"a","limit":3,"note":"abcd","ids":["x.1"]}`, "", ""},
		{"slug absent", `{}`, "slug", "required"},
		{"slug empty", `{"slug":""}`, "slug", "required"},
		{"slug upper", `{"slug":"Demo"}`, "slug", "pattern"},
		{"org bad", `{"slug":"demo","org":"-x"}`, "org", "pattern"},
		{"enum", `{"slug":"demo","kind":"c"}`, "kind", "enum"},
		{"below minimum", `{"slug":"demo","limit":-1}`, "limit", "minimum"},
		{"above maximum", `{"slug":"demo","limit":11}`, "limit", "maximum"},
		{"too long", `{"slug":"demo","note":"abcde"}`, "note", "maxLength"},
		{"bad element", `{"slug":"demo","ids":["ok","-no"]}`, "ids[1]", "pattern"},
		{"displayable name", `{"slug":"demo","name":"Café Ünïcode 名前 🚢"}`, "", ""},
		{"name with a newline", `{"slug":"demo","name":"a\nb"}`, "name", "pattern"},
		{"name with a bidi override", `{"slug":"demo","name":"a\u202eb"}`, "name", "pattern"},
		{"name with a zero-width space", `{"slug":"demo","name":"a\u200bb"}`, "name", "pattern"},
		{"name with a tag character", `{"slug":"demo","name":"a\udb40\udc01b"}`, "name", "pattern"},
		{"name with U+FFFD", `{"slug":"demo","name":"a\ufffdb"}`, "name", "pattern"},
		{"pointer set in range", `{"slug":"demo","size":8,"region":"nyc3"}`, "", ""},
		{"pointer set to zero", `{"slug":"demo","size":0}`, "size", "minimum"},
		{"pointer set above maximum", `{"slug":"demo","size":9}`, "size", "maximum"},
		{"pointer set to an empty string", `{"slug":"demo","region":""}`, "region", "pattern"},
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

// BenchmarkCheck is Check on a valid body, what every signed request
// pays (docs/operations.md, "Ingest"): it should not allocate.
func BenchmarkCheck(b *testing.B) {
	size := int64(4)
	v := tagged{Slug: "demo-harbor", Org: "acme", Kind: "a", Limit: 3, Note: "abcd", IDs: []string{"x.1", "y.2"}, Name: "Café", Size: &size}
	b.ReportAllocs()
	for b.Loop() {
		if bad := Check(&v); bad != nil {
			b.Fatal(bad.Message())
		}
	}
}
