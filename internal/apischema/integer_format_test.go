package apischema

import (
	"reflect"
	"testing"
	"time"
)

// TestIntegerFormats: an integer field's schema carries the OpenAPI
// format that holds every value of its Go type (int64 for int, int64,
// uint32 and a duration; int32 for the narrower kinds) and none where no
// format does (uint64 reaches beyond int64): docs/operations.md, "OpenAPI".
func TestIntegerFormats(t *testing.T) {
	type ints struct {
		I   int           `json:"i"`
		I64 *int64        `json:"i64"`
		I32 int32         `json:"i32"`
		I16 int16         `json:"i16"`
		U8  uint8         `json:"u8"`
		U32 uint32        `json:"u32"`
		U64 uint64        `json:"u64"`
		D   time.Duration `json:"d"`
	}
	props := For(reflect.TypeOf(ints{}), Request)["properties"].(Schema)
	for name, want := range map[string]any{"i": "int64", "i64": "int64", "i32": "int32", "i16": "int32", "u8": "int32", "u32": "int64", "u64": nil, "d": "int64"} {
		t.Run(name, func(t *testing.T) {
			p := props[name].(Schema)
			if p["type"] != "integer" || p["format"] != want {
				t.Errorf("%s: %v, want type integer, format %v", name, p, want)
			}
		})
	}
}
