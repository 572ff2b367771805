package storage

import (
	"context"
	"fmt"
	"io/fs"
	"testing"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// vanishingClient is a replica client whose first listings fail the way
// the file client's does when compaction removes a file between reading
// the directory and stating the entry.
type vanishingClient struct {
	litestream.ReplicaClient
	failures int // listings left to fail
	calls    int
	err      error
}

func (c *vanishingClient) LTXFiles(_ context.Context, level int, _ ltx.TXID, _ bool) (ltx.FileIterator, error) {
	c.calls++
	if c.failures > 0 {
		c.failures--
		if c.err != nil {
			return nil, c.err
		}
		return nil, &fs.PathError{Op: "lstat", Path: "ltx/0/0000000000000002-0000000000000002.ltx", Err: fs.ErrNotExist}
	}
	if level == 0 {
		return ltx.NewFileInfoSliceIterator([]*ltx.FileInfo{{Level: 0, MinTXID: 1, MaxTXID: 3}}), nil
	}
	return ltx.NewFileInfoSliceIterator(nil), nil
}

// TestReplicaBaseRetriesAVanishedFile: a listing that fails because a
// file vanished mid-listing is taken again (up to listingAttempts), so
// verify does not fail a healthy replica; other errors, and a file that
// keeps vanishing, are returned (docs/operations.md, "Replication").
func TestReplicaBaseRetriesAVanishedFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		client   *vanishingClient
		wantErr  bool
		wantBase bool
	}{
		{name: "one vanished file", client: &vanishingClient{failures: 1}, wantBase: true},
		{name: "vanishing on every attempt", client: &vanishingClient{failures: listingAttempts}, wantErr: true},
		{name: "another error", client: &vanishingClient{failures: 1, err: fmt.Errorf("permission denied")}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, any, err := replicaBase(context.Background(), tc.client)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (base != tc.wantBase || !any) {
				t.Fatalf("base %v any %v, want base %v and a history", base, any, tc.wantBase)
			}
		})
	}
}
