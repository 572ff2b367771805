package ingest

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestEventKindsAreTheTag: the lifecycle event's kind enum, which the
// OpenAPI document and validateLifecycleEvent read, lists exactly the
// kinds the ingest path handles (eventKinds).
func TestEventKindsAreTheTag(t *testing.T) {
	f, _ := reflect.TypeFor[protocol.LifecycleEventV1]().FieldByName("Kind")
	tag := slices.Sorted(slices.Values(apischema.RulesOf(f.Tag).Enum))
	var known []string
	for k := range eventKinds {
		known = append(known, k)
	}
	slices.Sort(known)
	if !slices.Equal(tag, known) {
		t.Fatalf("kind tag enum %v; eventKinds %v", tag, known)
	}
}

// TestRunTagsAreTheConstants: the run report's artifacts cap and its
// locator url's length, which the OpenAPI document and normalizeRun's
// Check read, are MaxArtifactsPerRun and maxArtifactURL; the name's
// pattern allows maxArtifactName bytes and the media type's maxMediaType.
func TestRunTagsAreTheConstants(t *testing.T) {
	f, _ := reflect.TypeFor[protocol.RunReportV1]().FieldByName("Artifacts")
	if got := apischema.RulesOf(f.Tag).MaxItems; got != MaxArtifactsPerRun {
		t.Fatalf("artifacts tag maxItems %d; MaxArtifactsPerRun %d", got, MaxArtifactsPerRun)
	}
	f, _ = reflect.TypeFor[protocol.ArtifactLocator]().FieldByName("URL")
	if got := apischema.RulesOf(f.Tag).MaxLength; got != maxArtifactURL {
		t.Fatalf("locator url tag maxLength %d; maxArtifactURL %d", got, maxArtifactURL)
	}
	for _, tc := range []struct {
		pattern string
		longest string
	}{
		{"artifactName", strings.Repeat("n", maxArtifactName)},
		{"mediaType", strings.Repeat("a", 127) + "/" + strings.Repeat("b", maxMediaType-128)},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			re := regexp.MustCompile(apischema.Patterns[tc.pattern])
			if !re.MatchString(tc.longest) || re.MatchString(tc.longest+"x") {
				t.Fatalf("%s: the longest accepted is not %d bytes", tc.pattern, len(tc.longest))
			}
		})
	}
}

// TestHeartbeatPatternsAreTheRules: the heartbeat's agentVersion and the
// deployment's region and size patterns refuse exactly what the handler's
// rules did before the tags (docs/operations.md, "Heartbeats and
// deadlines"): agentVersion 1-64 printable ASCII characters, a label a
// provider slug of at most 64 characters. Checked on every string of up to
// three characters over an alphabet of the edge cases, and at the lengths.
func TestHeartbeatPatternsAreTheRules(t *testing.T) {
	version := regexp.MustCompile(apischema.Patterns["version"])
	label := regexp.MustCompile(apischema.Patterns["label"])
	oldLabel := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	alphabet := []string{"a", "Z", "0", " ", "~", ".", "-", "_", "\x1f", "\x7f", "é"}
	var all func(prefix string, n int)
	all = func(s string, n int) {
		printable := s != "" && len(s) <= 64
		for i := 0; i < len(s); i++ {
			printable = printable && s[i] >= 0x20 && s[i] <= 0x7e
		}
		if version.MatchString(s) != printable {
			t.Fatalf("version %q: pattern %v, rule %v", s, !printable, printable)
		}
		if label.MatchString(s) != oldLabel.MatchString(s) {
			t.Fatalf("label %q: pattern and rule differ", s)
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			all(s+c, n-1)
		}
	}
	all("", 3)
	if !version.MatchString(strings.Repeat("v", 64)) || version.MatchString(strings.Repeat("v", 65)) {
		t.Fatal("version: the longest accepted is not 64 characters")
	}
}
