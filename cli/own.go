package cli

import (
	"reflect"
	"strings"
)

// OwnCommands are the names of the top-level commands cli declares itself
// (admin, mcp, version …), beside the ones main wires in: the light binary
// (cmd/chalupa, cli/light) forwards to chalupad only the server commands
// cli does not declare (docs/operations.md, "Releases").
func OwnCommands() []string {
	t := reflect.TypeFor[root]()
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if _, ok := f.Tag.Lookup("cmd"); !ok {
			continue
		}
		name := f.Tag.Get("name")
		if name == "" {
			name = strings.ToLower(f.Name) // kong's name for a one-word field
		}
		names = append(names, name)
	}
	return names
}
