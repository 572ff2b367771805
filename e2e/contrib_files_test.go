package e2e

import (
	"bufio"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// configVars are the environment variables the daemon reads: the rows of
// its variable table (daemon.VariableNames). Config is a struct of
// sections whose fields do not name the variables (docs/architecture.md,
// "Recipes: the files each everyday change touches").
func configVars(t *testing.T) []string {
	t.Helper()
	out := daemon.VariableNames()
	if len(out) < 14 {
		t.Fatalf("found only %d configuration variables in the daemon's variable table: %v", len(out), out)
	}
	return out
}

// parseEnvFile reads KEY=VALUE lines the way systemd's EnvironmentFile does
// for the simple cases the example uses (comments, double quotes). Commented
// assignments ("#KEY=…") are returned in documented.
func parseEnvFile(t *testing.T, path string) (set map[string]string, documented map[string]bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set, documented = map[string]string{}, map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		commented := strings.HasPrefix(line, "#")
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "#"), "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") || strings.ToUpper(k) != k {
			continue
		}
		documented[k] = true
		if !commented {
			set[k] = strings.Trim(v, `"`)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return set, documented
}

// proseOnly are the variables the example and the README name only in
// prose, with no assignment line or table row of their own, each with the
// reason.
var proseOnly = map[string]bool{
	// Deprecated: named beside CHALUPA_REAPER, which replaces it; an
	// assignment line would invite a new operator to set it.
	"CHALUPA_REAPER_DRY_RUN": true,
}

// TestEnvExample checks contrib/chalupa.env.example documents every variable
// daemon.Config reads and, with its placeholders filled in, is a configuration
// serve accepts.
func TestEnvExample(t *testing.T) {
	t.Parallel()
	set, documented := parseEnvFile(t, "contrib/chalupa.env.example")
	for _, k := range configVars(t) {
		if !documented[k] && !proseOnly[k] {
			t.Errorf("contrib/chalupa.env.example does not document %s", k)
		}
	}
	b, err := os.ReadFile("contrib/chalupa.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for k := range proseOnly {
		if !strings.Contains(string(b), k) {
			t.Errorf("contrib/chalupa.env.example does not name %s, even in prose", k)
		}
	}
	if !strings.Contains(string(b), "head -c 32 /dev/urandom | base64") {
		t.Error("the example does not say how to generate the master key")
	}

	fills := map[string]string{
		"CHALUPA_ADMIN_TOKEN":       proctest.RandomToken(32),
		"CHALUPA_READY_TOKEN":       proctest.RandomToken(32),
		"CHALUPA_INGEST_MASTER_KEY": base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
		"CHALUPA_REPLICA_URL":       strings.ReplaceAll(set["CHALUPA_REPLICA_URL"], "REPLACE_BUCKET", "chalupa-backups"),
	}
	env := map[string]string{"CHALUPA_DATA_DIR": t.TempDir()}
	for k, v := range set {
		switch {
		case fills[k] != "":
			env[k] = fills[k]
		case strings.Contains(v, "REPLACE"):
			env[k] = k + "-" + proctest.RandomToken(24)
		default:
			env[k] = v
		}
	}
	if _, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Errorf("the example with its placeholders filled in is refused: %v", err)
	}
}

// TestSystemdUnit checks the hardening and shutdown settings of
// contrib/chalupa.service that the platform issue asks for.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("contrib/chalupa.service")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			have[l] = true
		}
	}
	for _, want := range []string{
		"NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/chalupa", "ProtectHome=yes",
		"PrivateTmp=yes", "EnvironmentFile=/etc/chalupa/chalupa.env", "User=chalupa", "StateDirectory=chalupa",
		"WorkingDirectory=/var/lib/chalupa", "Environment=CHALUPA_DATA_DIR=/var/lib/chalupa", "KillSignal=SIGTERM",
		"TimeoutStopSec=45", "Restart=on-failure", "ExecStart=/usr/local/bin/chalupad serve",
	} {
		if !have[want] {
			t.Errorf("contrib/chalupa.service lacks %q", want)
		}
	}
}

// TestDocCitationsExist: every comment that cites a section of
// docs/operations.md or docs/architecture.md ("docs/operations.md, \"Signed
// ingest\"") names a heading that exists, so citations cannot rot when a
// section is renamed.
func TestDocCitationsExist(t *testing.T) {
	t.Parallel()
	headings := map[string]map[string]bool{}
	for _, doc := range []string{"operations", "architecture"} {
		b, err := os.ReadFile("docs/" + doc + ".md")
		if err != nil {
			t.Fatal(err)
		}
		headings[doc] = map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			if h, ok := strings.CutPrefix(line, "## "); ok {
				headings[doc][strings.TrimSpace(h)] = true
			}
		}
	}
	// A citation may wrap across comment lines: join them first.
	wrap := regexp.MustCompile(`\n\s*(//|#)\s*`)
	cite := regexp.MustCompile(`docs/(operations|architecture)\.md(?:'s)?,?\s+((?:"[^"\n]+"(?:,\s*|\s+and\s+)?)+)`)
	quoted := regexp.MustCompile(`"([^"\n]+)"`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && path != filepath.Base(path) && (strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".sh") || strings.HasPrefix(path, "contrib/")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md")
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := wrap.ReplaceAllString(string(b), " ")
		for _, m := range cite.FindAllStringSubmatch(text, -1) {
			for _, q := range quoted.FindAllStringSubmatch(m[2], -1) {
				found++
				if !headings[m[1]][q[1]] {
					t.Errorf("%s cites docs/%s.md, %q: no such section", f, m[1], q[1])
				}
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d citations; the pattern no longer matches how the code cites", found)
	}
	t.Logf("%d citations checked", found)
}

// TestBenchmarksSetEveryQuota checks the measurement tools' servers run with
// every CHALUPA_QUOTA_* daemon.Config reads set to 0 (harness.BenchmarkQuotaEnv,
// read as source: the harness is internal to contrib/), so no figure
// measures 429s and a new quota cannot be forgotten there.
func TestBenchmarksSetEveryQuota(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("contrib/internal/harness/chalupa.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range configVars(t) {
		if !strings.HasPrefix(k, "CHALUPA_QUOTA_") {
			continue
		}
		n++
		if !strings.Contains(string(b), `"`+k+`=0"`) {
			t.Errorf("harness.BenchmarkQuotaEnv does not set %s=0", k)
		}
	}
	if n == 0 {
		t.Fatal("daemon.Config reads no CHALUPA_QUOTA_* variable")
	}
}

// TestReadmeUsesNoRevokedKey: the README's walk-through revokes the first
// key it issued; no later command of it may use that key's files, or a new
// operator following it gets 401 key_revoked (the agent only spools).
func TestReadmeUsesNoRevokedKey(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	revokes := regexp.MustCompile(`keys revoke "\$\(cat ([A-Za-z0-9._-]+)/key-id\)"`).FindAllStringSubmatchIndex(readme, -1)
	if len(revokes) == 0 {
		t.Fatal("the README revokes no key: this test checks nothing")
	}
	for _, m := range revokes {
		dir := readme[m[2]:m[3]]
		t.Run(dir, func(t *testing.T) {
			after := readme[m[1]:]
			for _, use := range []string{dir + "/ingest.key", dir + "/key-id"} {
				if i := strings.Index(after, use); i >= 0 {
					line := 1 + strings.Count(readme[:m[1]+i], "\n")
					t.Errorf("README.md:%d uses %s after the walk-through revoked that key", line, use)
				}
			}
		})
	}
}

// TestReadmeNamesEveryVariable: the README's "Configuration" table names
// every variable the daemon reads (daemon.VariableNames), as it does
// today; a variable added to the table alone would be missing there
// without a word.
func TestReadmeNamesEveryVariable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Configuration\n")
	if !ok {
		t.Fatal(`README.md has no "## Configuration" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, k := range configVars(t) {
		if proseOnly[k] {
			// Named in the row of the variable that replaces it.
			if !strings.Contains(section, "`"+k+"`") {
				t.Errorf("README.md's Configuration section does not name %s", k)
			}
			continue
		}
		if !strings.Contains(section, "| `"+k+"`") && !strings.Contains(section, " / `"+k+"`") {
			t.Errorf("README.md's Configuration table does not name %s", k)
		}
	}
}
