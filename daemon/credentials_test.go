package daemon_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestWriteTokenReachesOnlyTheWiring: DIGITALOCEAN_WRITE_TOKEN, the only
// platform write credential, is read from the environment in one place
// (its row in daemon/config_vars.go; the reaper's and converge's sections
// name it in their refusals) and kept in an unexported field of the Reaper
// section, so no other package can reach it: no exported field (at any
// depth) or argument-less exported method of Config yields it, and no other source file names the variable
// (docs/operations.md, "Configuration"). The daemon hands it to the reaper
// alone.
func TestWriteTokenReachesOnlyTheWiring(t *testing.T) {
	const write = "do-write-token-value-0123456789abcdef"
	env := map[string]string{
		"CHALUPA_DATA_DIR":         t.TempDir(),
		"CHALUPA_LISTEN":           "127.0.0.1:0",
		"DIGITALOCEAN_READ_TOKEN":  "do-read-token-value-0123456789abcdef",
		"DIGITALOCEAN_WRITE_TOKEN": write,
	}
	for k, v := range proctest.NewSecrets() {
		env[k] = v
	}
	cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}

	t.Run("exported fields", func(t *testing.T) {
		v := reflect.ValueOf(cfg).Elem()
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.IsExported() && strings.Contains(stringsIn(v.Field(i)), write) {
				t.Errorf("Config.%s holds the write token", f.Name)
			}
		}
	})
	t.Run("exported methods", func(t *testing.T) {
		v := reflect.ValueOf(cfg)
		for i := range v.NumMethod() {
			m := v.Type().Method(i)
			if m.Type.NumIn() != 1 { // the receiver only
				continue
			}
			for _, out := range v.Method(i).Call(nil) {
				if strings.Contains(stringsIn(out), write) {
					t.Errorf("Config.%s() returns the write token", m.Name)
				}
			}
		}
	})
	t.Run("source files", func(t *testing.T) {
		root := proctest.RepoRoot(t)
		allowed := map[string]bool{}
		for _, f := range []string{"config_vars.go", "config_reaper.go", "config_converge.go"} {
			allowed[filepath.Join("daemon", f)] = true
		}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == ".git" || d.Name() == ".tools") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if strings.Contains(string(b), "DIGITALOCEAN_WRITE_TOKEN") && !allowed[rel] {
				t.Errorf("%s names DIGITALOCEAN_WRITE_TOKEN; only the daemon's wiring may read it", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// stringsIn joins every string another package can reach from v (strings,
// Secrets, slices, arrays, maps, exported struct fields, pointers),
// unredacted.
func stringsIn(v reflect.Value) string {
	var b strings.Builder
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			b.WriteString(v.String())
			b.WriteByte('\n')
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				walk(k)
				walk(v.MapIndex(k))
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		}
	}
	walk(v)
	return b.String()
}
