package logs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// send performs a presigned request with body.
func send(t *testing.T, g logs.Signed, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(g.Method, g.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range g.Headers {
		req.Header.Set(k, v)
	}
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func newStore(t *testing.T, clock clockwork.Clock) (*proctest.S3, *logs.S3) {
	gw := proctest.StartVersityGW(t)
	loc, err := logs.ParseLocation("s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	return gw, logs.NewS3(loc, gw.AccessKey, gw.SecretKey, clock)
}

// TestS3Grants drives presigned PUT and GET grants against versitygw: the
// store accepts exactly the planned body before expiry and refuses a
// different body, a forged signature and an expired grant.
func TestS3Grants(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now())
	_, st := newStore(t, clock)
	ctx := context.Background()
	body := []byte(strings.Repeat("journal line\n", 100))
	sum := sha256.Sum256(body)
	key := st.Location().Key("grants/one")

	t.Run("other size refused", func(t *testing.T) {
		g, err := st.PresignPut(ctx, key, int64(len(body)), sum, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code := send(t, g, append(body, '!')); code != http.StatusForbidden {
			t.Fatalf("PUT of one byte more: %d, want 403 (Content-Length is signed)", code)
		}
		if _, err := st.Head(ctx, key); !errors.Is(err, logs.ErrObjectMissing) {
			t.Fatalf("object after refused PUT: %v", err)
		}
	})
	t.Run("forged signature refused", func(t *testing.T) {
		g, _ := st.PresignPut(ctx, key, int64(len(body)), sum, time.Minute)
		i := strings.Index(g.URL, "X-Amz-Signature=") + len("X-Amz-Signature=")
		forged := []byte(g.URL)
		if forged[i] == 'a' {
			forged[i] = 'b'
		} else {
			forged[i] = 'a'
		}
		g.URL = string(forged)
		if code := send(t, g, body); code != http.StatusForbidden {
			t.Fatalf("forged grant: %d, want 403", code)
		}
	})
	t.Run("expired grant refused", func(t *testing.T) {
		// Signed by a store whose clock is past: the grant has expired.
		gw, _ := newStore(t, nil)
		loc, _ := logs.ParseLocation("s3://" + gw.Bucket + "?endpoint=" + gw.Endpoint)
		past := logs.NewS3(loc, gw.AccessKey, gw.SecretKey, clockwork.NewFakeClockAt(time.Now().Add(-2*logs.MaxGrantTTL)))
		g, err := past.PresignPut(ctx, "expired", int64(len(body)), sum, logs.MaxGrantTTL)
		if err != nil {
			t.Fatal(err)
		}
		if code := send(t, g, body); code != http.StatusForbidden {
			t.Fatalf("expired grant: %d, want 403", code)
		}
		fresh := logs.NewS3(loc, gw.AccessKey, gw.SecretKey, nil)
		if _, err := fresh.Head(ctx, "expired"); !errors.Is(err, logs.ErrObjectMissing) {
			t.Fatalf("object after expired PUT: %v", err)
		}
	})
	t.Run("exact body stored and readable", func(t *testing.T) {
		g, err := st.PresignPut(ctx, key, int64(len(body)), sum, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if g.Expires.Sub(clock.Now()) != time.Minute {
			t.Fatalf("expires %v after now, want 1m", g.Expires.Sub(clock.Now()))
		}
		if code := send(t, g, body); code != http.StatusOK {
			t.Fatalf("PUT: %d", code)
		}
		o, err := st.Head(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if o.Size != int64(len(body)) {
			t.Fatalf("size %d", o.Size)
		}
		if o.SHA256 != nil && !bytes.Equal(o.SHA256, sum[:]) {
			t.Fatalf("checksum differs")
		}
		t.Logf("store reports sha256: %v", o.SHA256 != nil)
		get, _ := st.PresignGet(ctx, key, 0)
		if get.Expires.Sub(clock.Now()) != logs.MaxGrantTTL {
			t.Fatalf("a TTL of 0 is the maximum")
		}
		resp, err := http.Get(get.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(got, body) {
			t.Fatalf("GET returned %d bytes", len(got))
		}
		if err := st.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Head(ctx, key); !errors.Is(err, logs.ErrObjectMissing) {
			t.Fatalf("after delete: %v", err)
		}
		if err := st.Delete(ctx, key); err != nil {
			t.Fatalf("deleting a missing key: %v", err)
		}
	})
}

// TestLocationOverlaps compares whole path segments in one bucket.
func TestLocationOverlaps(t *testing.T) {
	for _, tc := range []struct {
		logs, bucket, path string
		want               bool
	}{
		{"s3://b/logs", "b", "/prod", false},
		{"s3://b/prod-logs", "b", "/prod", false},
		{"s3://b/prod/logs", "b", "/prod", true},
		{"s3://b/prod", "b", "/prod/db", true},
		{"s3://b", "b", "/prod", true},
		{"s3://b/logs", "b", "", true},
		{"s3://b/logs", "c", "/logs", false},
	} {
		t.Run(tc.logs+" vs "+tc.bucket+tc.path, func(t *testing.T) {
			loc, err := logs.ParseLocation(tc.logs)
			if err != nil {
				t.Fatal(err)
			}
			if got := loc.Overlaps(tc.bucket, tc.path); got != tc.want {
				t.Fatalf("Overlaps = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestS3Digest: Digest reads an object back and hashes what it read, at
// most limit+1 bytes; a missing object is ErrObjectMissing.
func TestS3Digest(t *testing.T) {
	_, st := newStore(t, nil)
	ctx := context.Background()
	body := bytes.Repeat([]byte("journal line\n"), 1000)
	sum := sha256.Sum256(body)
	key := st.Location().Key("digest/one")
	g, err := st.PresignPut(ctx, key, int64(len(body)), sum, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code := send(t, g, body); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	for _, tc := range []struct {
		name  string
		key   string
		limit int64
		size  int64
		sum   []byte
		err   error
	}{
		{"the planned size", key, int64(len(body)), int64(len(body)), sum[:], nil},
		{"longer than the limit", key, int64(len(body)) - 1, int64(len(body)), nil, nil},
		{"missing", st.Location().Key("digest/none"), 10, 0, nil, logs.ErrObjectMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := st.Digest(ctx, tc.key, tc.limit)
			if !errors.Is(err, tc.err) || o.Size != tc.size || !bytes.Equal(o.SHA256, tc.sum) {
				t.Fatalf("Digest = %+v, %v; want size %d, sum %x, %v", o, err, tc.size, tc.sum, tc.err)
			}
		})
	}
}

// BenchmarkDigestChunk is what commit's verification costs per chunk of
// the largest size (1 MiB): one GET from versitygw on loopback and the
// SHA-256 of the bytes (docs/operations.md, "Logs"). Run with -cpu 1.
func BenchmarkDigestChunk(b *testing.B) {
	gw := proctest.StartVersityGW(b)
	loc, err := logs.ParseLocation("s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint)
	if err != nil {
		b.Fatal(err)
	}
	st := logs.NewS3(loc, gw.AccessKey, gw.SecretKey, nil)
	ctx := context.Background()
	body := make([]byte, protocol.DefaultMaxChunkBytes)
	for i := range body {
		body[i] = byte(i * 7)
	}
	sum := sha256.Sum256(body)
	key := loc.Key("bench/chunk")
	g, err := st.PresignPut(ctx, key, int64(len(body)), sum, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	req, _ := http.NewRequest(g.Method, g.URL, bytes.NewReader(body))
	for k, v := range g.Headers {
		req.Header.Set(k, v)
	}
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("PUT: %v %v", resp, err)
	}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		o, err := st.Digest(ctx, key, int64(len(body)))
		if err != nil || !bytes.Equal(o.SHA256, sum[:]) {
			b.Fatalf("Digest: %+v %v", o, err)
		}
	}
}

// BenchmarkSHA256Chunk is the hashing alone of one 1 MiB chunk.
func BenchmarkSHA256Chunk(b *testing.B) {
	body := make([]byte, protocol.DefaultMaxChunkBytes)
	b.SetBytes(int64(len(body)))
	for range b.N {
		sha256.Sum256(body)
	}
}
