package daemon

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rowsAt are the rows of the table whose pointer is field's address.
func rowsAt(rows []variable, field reflect.Value) []variable {
	var out []variable
	for _, v := range rows {
		p := reflect.ValueOf(v.ptr)
		if p.Type().Elem() == field.Type() && p.UnsafePointer() == field.Addr().UnsafePointer() {
			out = append(out, v)
		}
	}
	return out
}

// loadWith is LoadConfig over a loopback environment plus name=value.
func loadWith(t *testing.T, name, value string) (*Config, error) {
	t.Helper()
	env := map[string]string{"CHALUPA_DATA_DIR": t.TempDir(), "CHALUPA_LISTEN": "127.0.0.1:0", name: value}
	return LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

// checkDerived fails t unless the row v shows up, without an edit
// anywhere but its own row, in serve --help's list, the docs table and
// (when it has a preview) config check's preview, and unless garbage is
// refused naming the variable.
func checkDerived(t *testing.T, v variable, garbage bool) {
	t.Helper()
	if !strings.Contains(serveEnvironmentHelp(), "  "+v.name+" ") {
		t.Errorf("serve --help's environment list does not name %s", v.name)
	}
	docs := configDocsTable()
	if !strings.Contains(docs, "`"+v.name+"`") && (v.doc.group == "" || !strings.Contains(docs, "| "+v.doc.group+" |")) {
		t.Errorf("the docs table has no row for %s", v.name)
	}
	c, err := loadWith(t, "UNRELATED", "")
	if err != nil {
		t.Fatal(err)
	}
	if v.show != nil && !slices.ContainsFunc(c.Redacted(), func(r [2]string) bool { return r[0] == v.name }) {
		t.Errorf("config check's preview does not show %s", v.name)
	}
	if !garbage {
		return
	}
	_, err = loadWith(t, v.name, "not-a-value!")
	var ce *ConfigError
	if !errors.As(err, &ce) || !slices.ContainsFunc(ce.Problems, func(p string) bool { return strings.HasPrefix(p, v.name+" ") }) {
		t.Errorf("%s=not-a-value! is not refused naming the variable: %v", v.name, err)
	}
}

// TestQuotaRecipe walks the recipe "add a quota" (docs/operations.md,
// "Quotas"): a field of ingest.Quotas with its default in
// ingest.DefaultQuotas, and one row of the table (quotaSpecs). Every field
// has exactly one row, and from that row alone the quota is read, bounded,
// shown by config check, listed by serve --help and the docs, and named by
// UnlimitedQuotas at 0: a new field without its row, or a row that needs
// another file edited, fails here.
func TestQuotaRecipe(t *testing.T) {
	c := newConfig()
	rows := c.variables()
	q := reflect.ValueOf(&c.Quotas).Elem()
	for i := range q.NumField() {
		f := q.Type().Field(i)
		t.Run(f.Name, func(t *testing.T) {
			at := rowsAt(rows, q.Field(i))
			if len(at) != 1 {
				t.Fatalf("ingest.Quotas.%s has %d rows in the variable table, want exactly one", f.Name, len(at))
			}
			v := at[0]
			if !v.quota {
				t.Errorf("%s is not marked a quota", v.name)
			}
			checkDerived(t, v, true)
			got, err := loadWith(t, v.name, "500")
			if err != nil {
				t.Fatal(err)
			}
			if n := reflect.ValueOf(&got.Quotas).Elem().Field(i).Int(); n != 500 {
				t.Errorf("%s=500 loads %d", v.name, n)
			}
			got, err = loadWith(t, v.name, "0")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(got.UnlimitedQuotas(), v.name) {
				t.Errorf("%s=0 is not in UnlimitedQuotas %q", v.name, got.UnlimitedQuotas())
			}
			if !slices.Contains(got.Redacted(), [2]string{v.name, unlimitedText}) {
				t.Errorf("%s=0 is not previewed as %q", v.name, unlimitedText)
			}
			for _, bad := range []string{"-1", strconv.Itoa(1 << 62)} {
				if _, err := loadWith(t, v.name, bad); err == nil {
					t.Errorf("%s=%s is accepted", v.name, bad)
				}
			}
		})
	}
}

// reaperDerived are the Reaper section's fields that no variable sets
// directly: each is worked out from a row's value by validateReaper.
var reaperDerived = map[string]string{
	"DryRun":    "Mode == ReaperModeDryRun",
	"requested": "CHALUPA_REAPER as given, before validateReaper resolves Mode",
	"invalid":   "CHALUPA_REAPER was refused, so validateReaper resolves nothing from it",
}

// TestReaperSettingRecipe walks the recipe "add a reaper setting": a field
// of ReaperConfig and one row of the table pointing at it. Every field but
// the derived ones has exactly one row, which alone puts it in serve
// --help, the docs and config check's preview, and refuses a value it
// cannot read (the write token, a secret, takes any value).
func TestReaperSettingRecipe(t *testing.T) {
	c := newConfig()
	rows := c.variables()
	r := reflect.ValueOf(&c.Reaper).Elem()
	for i := range r.NumField() {
		f := r.Type().Field(i)
		t.Run(f.Name, func(t *testing.T) {
			at := rowsAt(rows, r.Field(i))
			if _, ok := reaperDerived[f.Name]; ok {
				if len(at) != 0 {
					t.Fatalf("derived field ReaperConfig.%s has a row", f.Name)
				}
				return
			}
			if len(at) != 1 {
				t.Fatalf("ReaperConfig.%s has %d rows in the variable table, want exactly one (or list it in reaperDerived)", f.Name, len(at))
			}
			checkDerived(t, at[0], f.Type != reflect.TypeFor[*Secret]())
		})
	}
}

// TestTableRows: every row has a help line and a docs row (its own, or
// its group's, written by the group's first row), and no name repeats.
func TestTableRows(t *testing.T) {
	rows := newConfig().variables()
	seen := map[string]bool{}
	for i, v := range rows {
		t.Run(v.name, func(t *testing.T) {
			if seen[v.name] {
				t.Fatalf("%s has two rows", v.name)
			}
			seen[v.name] = true
			if v.help == "" || v.load == nil || v.ptr == nil {
				t.Errorf("%s lacks its help line, its loader or its field", v.name)
			}
			first := i == 0 || v.doc.group == "" || rows[i-1].doc.group != v.doc.group
			if first && (v.doc.def == "" || v.doc.refusedWhen == "" || v.doc.why == "") {
				t.Errorf("%s's docs row lacks a column", v.name)
			}
		})
	}
}
