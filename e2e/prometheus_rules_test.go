package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// The Prometheus rules and their promtool unit tests (docs/operations.md,
// "Alerts").
const (
	promRulesFile     = "contrib/prometheus/chalupa-alerts.yml"
	promRulesTestFile = "contrib/prometheus/chalupa-alerts.test.yml"
)

// promRule is one alerting rule of promRulesFile, the fields the tests read.
type promRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// loadPromRules reads promRulesFile's rules, failing the test on a file
// that does not parse or holds none.
func loadPromRules(t *testing.T) []promRule {
	t.Helper()
	b, err := os.ReadFile(promRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []promRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", promRulesFile, err)
	}
	var out []promRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no rule", promRulesFile)
	}
	return out
}

// TestPrometheusRulesPromtool runs `promtool check rules` on the rules and
// `promtool test rules` on their unit tests, whose series make each rule
// fire and not fire (promtool from Debian's prometheus package,
// contrib/install-test-tools.sh).
func TestPrometheusRulesPromtool(t *testing.T) {
	t.Parallel()
	promtool := proctest.Promtool(t)
	for _, tc := range []struct{ name, cmd, file string }{
		{"check rules", "check", promRulesFile},
		{"test rules", "test", promRulesTestFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(promtool, tc.cmd, "rules", tc.file).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s rules %s: %v\n%s", tc.cmd, tc.file, err, out)
			}
		})
	}
}

// TestPrometheusRulesShape: every rule has a severity chalupa uses
// (critical or warning), a summary, a description and a runbook naming a
// section of docs/operations.md that exists, and the unit tests both fire
// it and expect it silent somewhere, so a rule added without a test fails
// here.
func TestPrometheusRulesShape(t *testing.T) {
	t.Parallel()
	rules := loadPromRules(t)
	ops, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(promRulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatalf("%s: %v", promRulesTestFile, err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, g := range tests.Tests {
		for _, c := range g.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				silent[c.Alertname] = true
			}
		}
	}
	runbook := regexp.MustCompile(`^docs/operations\.md, "([^"]+)"$`)
	seen := map[string]bool{}
	for _, r := range rules {
		t.Run(r.Alert, func(t *testing.T) {
			if seen[r.Alert] {
				t.Errorf("two rules alert %s", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("severity %q, want critical or warning", s)
			}
			for _, k := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("no %s annotation", k)
				}
			}
			m := runbook.FindStringSubmatch(r.Annotations["runbook"])
			switch {
			case m == nil:
				t.Errorf("runbook %q does not name a section as `docs/operations.md, \"Section\"`", r.Annotations["runbook"])
			case !bytes.Contains(ops, []byte("\n## "+m[1]+"\n")):
				t.Errorf("runbook names docs/operations.md, %q: no such section", m[1])
			}
			if !fires[r.Alert] {
				t.Errorf("%s never expects it to fire", promRulesTestFile)
			}
			if !silent[r.Alert] {
				t.Errorf("%s never expects it silent", promRulesTestFile)
			}
		})
	}
}

// prometheusOwn are the series a rule may read that Prometheus makes
// itself rather than scraping from chalupa, each with the reason.
var prometheusOwn = map[string]string{
	"up": "the scrape's own result: chalupa cannot report that it is down",
}

// promSelector is one metric selector of a rule's expression: a name and
// its equality matchers.
type promSelector struct {
	name     string
	matchers map[string]string
}

var (
	// promSelectorRE finds chalupa's metric names, and Prometheus's own,
	// with their optional label matchers, in an expression.
	promSelectorRE = regexp.MustCompile(`\b(chalupa_[a-z0-9_]+|up)\b(?:\{([^}]*)\})?`)
	// promMatcherRE is one label matcher.
	promMatcherRE = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	// promCounterFnRE finds the metric a counter-only function reads.
	promCounterFnRE = regexp.MustCompile(`\b(?:increase|rate|irate|resets)\(\s*(chalupa_[a-z0-9_]+)`)
)

// promSelectors returns the selectors of expr. Only equality matchers are
// read: a rule using another kind fails the test until this reads it.
func promSelectors(t *testing.T, alert, expr string) []promSelector {
	t.Helper()
	var out []promSelector
	for _, m := range promSelectorRE.FindAllStringSubmatch(expr, -1) {
		s := promSelector{name: m[1], matchers: map[string]string{}}
		if strings.TrimSpace(m[2]) != "" {
			for _, part := range strings.Split(m[2], ",") {
				mm := promMatcherRE.FindStringSubmatch(part)
				if mm == nil || mm[2] != "=" {
					t.Fatalf("%s: matcher %q: this test reads only name=\"value\" matchers", alert, part)
				}
				s.matchers[mm[1]] = mm[3]
			}
		}
		out = append(out, s)
	}
	return out
}

// TestPrometheusRulesReadLiveMetrics starts the built daemon, scrapes its
// /metrics with the ready token, and checks every metric a rule reads is
// there, with a series carrying each label value the rule matches, and
// that counter functions read counters: a metric renamed or relabelled in
// the code fails here instead of leaving an alert that never fires.
func TestPrometheusRulesReadLiveMetrics(t *testing.T) {
	t.Parallel()
	rules := loadPromRules(t)
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	r, err := d.Do(context.Background(), "GET", "/metrics", proctest.Bearer(d.ReadyToken()), nil)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", r.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	read := 0
	for _, rule := range rules {
		t.Run(rule.Alert, func(t *testing.T) {
			sels := promSelectors(t, rule.Alert, rule.Expr)
			if len(sels) == 0 {
				t.Fatalf("expression %q reads no metric this test recognises", rule.Expr)
			}
			for _, s := range sels {
				if _, own := prometheusOwn[s.name]; own {
					continue
				}
				read++
				f := families[s.name]
				if f == nil {
					t.Errorf("%s is not on a running daemon's /metrics", s.name)
					continue
				}
				if !anySeriesMatches(f, s.matchers) {
					t.Errorf("no series of %s has the labels %v; it has %v", s.name, s.matchers, labelValues(f))
				}
			}
			for _, m := range promCounterFnRE.FindAllStringSubmatch(rule.Expr, -1) {
				if f := families[m[1]]; f != nil && f.GetType() != dto.MetricType_COUNTER {
					t.Errorf("%s is read as a counter but is a %s", m[1], f.GetType())
				}
			}
		})
	}
	if read == 0 {
		t.Fatal("no rule reads a chalupa metric: the selector pattern no longer matches the rules")
	}
}

// anySeriesMatches reports whether a series of f carries every label of
// want with its value.
func anySeriesMatches(f *dto.MetricFamily, want map[string]string) bool {
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && have[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// labelValues lists f's series' label sets, for a failure message.
func labelValues(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		out = append(out, "{"+strings.Join(ls, ",")+"}")
	}
	sort.Strings(out)
	return out
}
