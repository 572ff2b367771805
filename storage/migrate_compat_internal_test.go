package storage

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/schema"
)

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       migrationKind
		err        bool
	}{
		{"expand", "-- chalupa:migration expand\n-- +goose Up\nCREATE TABLE x (a INTEGER);\n", migrationKind{Kind: KindExpand}, false},
		{"contract at its own version", "-- chalupa:migration contract\n-- +goose Up\n", migrationKind{Kind: KindContract, Floor: 30}, false},
		{"contract with a floor", "-- a comment first\n-- chalupa:migration contract floor=32\n-- +goose Up\n", migrationKind{Kind: KindContract, Floor: 32}, false},
		{"undeclared is a contract", "-- +goose Up\nDROP TABLE x;\n", migrationKind{Kind: KindContract, Floor: 30}, false},
		{"a declaration after goose Up does not count", "-- +goose Up\n-- chalupa:migration expand\n", migrationKind{Kind: KindContract, Floor: 30}, false},
		{"unknown kind", "-- chalupa:migration additive\n-- +goose Up\n", migrationKind{}, true},
		{"floor below its own version", "-- chalupa:migration contract floor=29\n-- +goose Up\n", migrationKind{}, true},
		{"expand with a floor", "-- chalupa:migration expand floor=31\n-- +goose Up\n", migrationKind{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseKind("0030_x.sql", 30, []byte(tc.body))
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), "0030_x.sql") {
					t.Fatalf("err = %v, want an error naming the file", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseKind = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestEveryNewMigrationDeclaresItsKind: each migration after the legacy ones
// says whether it expands or contracts (docs/operations.md, "Migrations and
// restore points"); an undeclared file would be read as a contract and stop
// the previous release from starting after an upgrade.
func TestEveryNewMigrationDeclaresItsKind(t *testing.T) {
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		var v int64
		for _, c := range n[:4] {
			v = v*10 + int64(c-'0')
		}
		if v <= LastLegacyMigration {
			continue
		}
		t.Run(n, func(t *testing.T) {
			b, err := fs.ReadFile(schema.FS, n)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.SplitN(string(b), "-- +goose Up", 2)[0], "-- chalupa:migration ") {
				t.Fatalf("%s declares no kind: add `-- chalupa:migration expand` (or contract) before `-- +goose Up`", n)
			}
			if _, err := parseKind(n, v, b); err != nil {
				t.Fatal(err)
			}
		})
	}
}
