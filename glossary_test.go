package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeGettingStartedAndGlossary: the README opens with "Getting
// started" before the reference material, links the glossary, and the
// glossary in docs/operations.md ("Glossary") defines each word a new
// operator meets, once.
func TestReadmeGettingStartedAndGlossary(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	heads := regexp.MustCompile(`(?m)^## (.+)$`).FindAllStringSubmatch(string(readme), -1)
	if len(heads) == 0 || heads[0][1] != "Getting started" {
		t.Fatalf("README's first section is not Getting started: %v", heads)
	}
	if !strings.Contains(string(readme), "(docs/operations.md#glossary)") {
		t.Error("README does not link docs/operations.md#glossary")
	}
	_, gloss, ok := strings.Cut(string(ops), "\n## Glossary\n")
	if !ok {
		t.Fatal("docs/operations.md has no Glossary section")
	}
	gloss, _, _ = strings.Cut(gloss, "\n## ")
	rows := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([^|]+?) \| ([^|]+) \|$`).FindAllStringSubmatch(gloss, -1) {
		for _, w := range strings.Split(m[1], " / ") {
			rows[w]++
		}
	}
	for _, w := range []string{"droplet", "environment", "box", "deployment", "envelope", "nonce", "rollup", "lease",
		"stack state", "converge", "preview", "up", "refresh", "destroy", "reaper", "idle deadline", "ingest key",
		"sunk", "oracle", "managed", "writer unit", "replica", "heartbeat", "agent"} {
		t.Run(w, func(t *testing.T) {
			if rows[w] != 1 {
				t.Errorf("the glossary defines %q %d times, want once", w, rows[w])
			}
		})
	}
}
