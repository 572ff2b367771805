package storage

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestWALAutocheckpointIsTheDocumentedBound: the write connection
// checkpoints at WALAutocheckpointPages (not SQLite's default of 1000, and
// never 0, which has stopped Litestream replicating), and the operating
// contract states that value and its reasons in "Storage and the writer".
func TestWALAutocheckpointIsTheDocumentedBound(t *testing.T) {
	db := openTestDB(t)
	var pages int
	if err := db.Writer.Do(context.Background(), func(tx Tx) error {
		return tx.QueryRowContext(context.Background(), "PRAGMA wal_autocheckpoint").Scan(&pages)
	}); err != nil {
		t.Fatal(err)
	}
	if pages != WALAutocheckpointPages || pages == 0 || pages == 1000 {
		t.Fatalf("write connection wal_autocheckpoint = %d, want WALAutocheckpointPages (%d)", pages, WALAutocheckpointPages)
	}

	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Storage and the writer\n")
	section, _, _ = strings.Cut(section, "\n## ")
	var row string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `wal_autocheckpoint` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal(`docs/operations.md, "Storage and the writer", has no wal_autocheckpoint row`)
	}
	for _, want := range []string{strconv.Itoa(WALAutocheckpointPages) + " pages", "never 0", "benbjohnson/litestream#1083", "Litestream stops"} {
		if !strings.Contains(row, want) {
			t.Errorf("the wal_autocheckpoint row lacks %q:\n%s", want, row)
		}
	}
}
