package strictjson

import (
	"errors"
	"testing"
)

// integralBody has the integer kinds a request body uses, a float and a
// string that must pass unchanged.
type integralBody struct {
	N     int             `json:"n"`
	Big   int64           `json:"big"`
	U     uint32          `json:"u"`
	P     *int            `json:"p"`
	Items []int           `json:"items"`
	F     float64         `json:"f"`
	S     string          `json:"s"`
	Inner struct{ M int } `json:"inner"`
}

// TestIntegralNumberForInteger: an integer field takes an integral number
// written with a fraction or an exponent (JSON Schema's integer admits
// 30.0 and 1e3; Python writes 30.0), anywhere in the body, while a string
// holding the same characters is left as sent; a fraction that is not
// integral, an integer beyond int64 and a number into a string field stay
// refused as the wrong type (docs/operations.md, "Admin API").
func TestIntegralNumberForInteger(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		check      func(integralBody) bool
	}{
		{"30.0", `{"n":30.0}`, func(v integralBody) bool { return v.N == 30 }},
		{"1e3", `{"n":1e3}`, func(v integralBody) bool { return v.N == 1000 }},
		{"-2.50E+1", `{"n":-2.50E+1}`, func(v integralBody) bool { return v.N == -25 }},
		{"1000e-3", `{"n":1000e-3}`, func(v integralBody) bool { return v.N == 1 }},
		{"-0.0", `{"n":-0.0}`, func(v integralBody) bool { return v.N == 0 }},
		{"int64 max written 9.223372036854775807e18", `{"big":9.223372036854775807e18}`, func(v integralBody) bool { return v.Big == 9223372036854775807 }},
		{"pointer, slice, nested", `{"p":5.0,"items":[1.0,2e0,3],"inner":{"M":4.00}}`, func(v integralBody) bool {
			return v.P != nil && *v.P == 5 && len(v.Items) == 3 && v.Items[1] == 2 && v.Inner.M == 4
		}},
		{"string and float left as sent", `{"n":7.0,"s":"a 30.0 \"1e3\" \\","f":2.5}`, func(v integralBody) bool {
			return v.N == 7 && v.S == `a 30.0 "1e3" \` && v.F == 2.5
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v integralBody
			if err := Decode([]byte(tc.body), &v); err != nil {
				t.Fatalf("Decode(%s): %v", tc.body, err)
			}
			if !tc.check(v) {
				t.Errorf("Decode(%s) = %+v", tc.body, v)
			}
		})
	}
	for _, tc := range []struct{ name, body string }{
		{"30.5", `{"n":30.5}`},
		{"beyond int64", `{"big":9.3e18}`},
		{"uint32 overflow", `{"u":5e9}`},
		{"negative into uint", `{"u":-1.0}`},
		{"huge exponent", `{"n":1e999999999}`},
		{"number into string", `{"s":30.0}`},
		{"one integral, one not", `{"n":1.0,"big":2.5}`},
	} {
		t.Run("refused "+tc.name, func(t *testing.T) {
			var v integralBody
			var se *ShapeError
			if err := Decode([]byte(tc.body), &v); !errors.As(err, &se) {
				t.Errorf("Decode(%s) = %v, want a ShapeError", tc.body, err)
			}
		})
	}
}
