// Package logs is the private log broker (docs/operations.md, "Logs"):
// agents upload compressed chunks of service logs straight to an S3
// bucket with presigned URLs; chalupa only plans, counts, verifies and
// grants, and never stores or proxies log bytes itself.
package logs

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/jonboulle/clockwork"
)

// Grant bounds (docs/operations.md, "Logs").
const (
	// MaxGrantTTL is the longest a presigned URL may live: a leaked URL
	// (a shell history, a proxy log) is useless after five minutes.
	MaxGrantTTL = 5 * time.Minute
	// DefaultGrantTTL is MaxGrantTTL: one 1 MiB chunk uploads in seconds
	// even on a slow link, and a longer grant would outlive the bound.
	DefaultGrantTTL = MaxGrantTTL
	// DefaultRegion signs requests when the URL names no region; Spaces
	// and versitygw ignore it.
	DefaultRegion = "us-east-1"
	// storeTimeout bounds one HEAD or DELETE the daemon makes: a slow
	// store must not hold an ingest request or a retention tick.
	storeTimeout = 20 * time.Second
)

// Errors of ParseLocation and the Store.
var (
	// ErrBadLocation: CHALUPA_LOGS_URL is not s3://bucket[/prefix] with
	// an optional http(s) endpoint and region.
	ErrBadLocation = errors.New("logs location must be s3://bucket[/prefix][?endpoint=http(s)://host&region=r]")
	// ErrObjectMissing: HEAD found no object at the key.
	ErrObjectMissing = errors.New("log object not found")
)

// Location is where log chunks are stored: a bucket, a key prefix ("" or
// "a/b", without slashes at either end), and the endpoint and region
// requests are signed for.
type Location struct {
	Bucket   string
	Prefix   string
	Endpoint string
	Region   string
}

// ParseLocation parses CHALUPA_LOGS_URL: s3://BUCKET[/PREFIX] with the
// query parameters endpoint (an absolute http(s) URL; a custom endpoint
// implies path-style addressing) and region. Credentials in the URL are
// refused (they belong in CHALUPA_LOGS_KEY/SECRET). Errors wrap
// ErrBadLocation and never repeat the URL.
func ParseLocation(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return Location{}, ErrBadLocation
	}
	if u.User != nil {
		return Location{}, fmt.Errorf("%w: credentials belong in CHALUPA_LOGS_KEY/SECRET, not the URL", ErrBadLocation)
	}
	loc := Location{Bucket: u.Host, Prefix: strings.Trim(path.Clean("/"+u.Path), "/"), Region: DefaultRegion}
	for k, v := range u.Query() {
		switch k {
		case "endpoint":
			e, err := url.Parse(v[0])
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return Location{}, fmt.Errorf("%w: endpoint must be an absolute http(s) URL", ErrBadLocation)
			}
			loc.Endpoint = e.Scheme + "://" + e.Host
		case "region":
			loc.Region = v[0]
		default:
			return Location{}, fmt.Errorf("%w: unknown parameter %q", ErrBadLocation, k)
		}
	}
	return loc, nil
}

// Overlaps reports whether the location shares keys with the replica at
// bucket and key path p: the same bucket, and one prefix contains the
// other (whole path segments). Endpoints are not compared: a bucket name
// reached through two endpoints may be one bucket.
func (l Location) Overlaps(bucket, p string) bool {
	if bucket != l.Bucket {
		return false
	}
	a, b := l.Prefix, strings.Trim(path.Clean("/"+p), "/")
	within := func(inner, outer string) bool {
		return outer == "" || inner == outer || strings.HasPrefix(inner, outer+"/")
	}
	return within(a, b) || within(b, a)
}

// Key returns the object key of name under the location's prefix.
func (l Location) Key(name string) string {
	if l.Prefix == "" {
		return name
	}
	return l.Prefix + "/" + name
}

// Object is what HEAD says of a stored object.
type Object struct {
	// Size is its length in bytes.
	Size int64
	// SHA256 is its SHA-256 when the store keeps the checksum the upload
	// sent (nil when it does not say).
	SHA256 []byte
}

// Signed is a presigned request: the agent or operator sends Method to URL
// with exactly Headers, before Expires.
type Signed struct {
	Method  string
	URL     string
	Headers map[string]string
	Expires time.Time
}

// Store is the object store the broker plans into. S3 is the real one.
type Store interface {
	// PresignPut signs a PUT of exactly size bytes with SHA-256 sum to
	// key, valid for ttl; it makes no network request.
	PresignPut(ctx context.Context, key string, size int64, sum [32]byte, ttl time.Duration) (Signed, error)
	// PresignGet signs a GET of key valid for ttl; no network request.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (Signed, error)
	// Head returns the object at key, or ErrObjectMissing.
	Head(ctx context.Context, key string) (Object, error)
	// Digest reads the object at key and returns its size and the
	// SHA-256 of its bytes as read, reading at most limit+1 bytes (an
	// object longer than limit reports a Size above it and no SHA256).
	// Errors: ErrObjectMissing, or the store's.
	Digest(ctx context.Context, key string, limit int64) (Object, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// S3 is a Store on an S3-compatible service, holding only the log
// credentials (never the replica's: docs/operations.md, "Logs").
type S3 struct {
	loc     Location
	clock   clockwork.Clock
	client  *s3.Client
	presign *s3.PresignClient
}

// NewS3 returns the Store for loc signed with key and secret; presigned
// URLs are dated by clock (nil: the real clock), so a grant's expiry is
// the daemon's clock plus its TTL. It makes no network request.
func NewS3(loc Location, key, secret string, clock clockwork.Clock) *S3 {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	opts := s3.Options{
		Region: loc.Region,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: key, SecretAccessKey: secret, Source: "CHALUPA_LOGS_KEY"}, nil
		}),
		HTTPClient: &http.Client{Timeout: storeTimeout},
		// Only the checksum the plan names: no SDK-chosen CRC header
		// the agent would have to reproduce.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if loc.Endpoint != "" {
		opts.BaseEndpoint = aws.String(loc.Endpoint)
		opts.UsePathStyle = true
	}
	c := s3.New(opts)
	return &S3{loc: loc, clock: clock, client: c, presign: s3.NewPresignClient(c, func(o *s3.PresignOptions) {
		o.Presigner = clockPresigner{signer: v4.NewSigner(), clock: clock}
	})}
}

// clockPresigner signs at the injected clock's time instead of the SDK's.
type clockPresigner struct {
	signer *v4.Signer
	clock  clockwork.Clock
}

// PresignHTTP implements s3.HTTPPresignerV4.
func (p clockPresigner) PresignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string,
	_ time.Time, optFns ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return p.signer.PresignHTTP(ctx, creds, r, payloadHash, service, region, p.clock.Now().UTC(), optFns...)
}

// Location returns where the store writes.
func (s *S3) Location() Location { return s.loc }

func clampTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 || ttl > MaxGrantTTL {
		return MaxGrantTTL
	}
	return ttl
}

// signed copies a presigned request; Host is implied by the URL.
func signed(method, u string, h http.Header, expires time.Time) Signed {
	out := Signed{Method: method, URL: u, Headers: map[string]string{}, Expires: expires}
	for k, v := range h {
		if strings.EqualFold(k, "Host") {
			continue
		}
		out.Headers[http.CanonicalHeaderKey(k)] = strings.Join(v, ",")
	}
	return out
}

// PresignPut implements Store: the signature covers Content-Length and
// x-amz-checksum-sha256, so the store itself refuses another body.
func (s *S3) PresignPut(ctx context.Context, key string, size int64, sum [32]byte, ttl time.Duration) (Signed, error) {
	ttl = clampTTL(ttl)
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(key), ContentLength: aws.Int64(size),
		ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return Signed{}, fmt.Errorf("presign log put: %w", err)
	}
	return signed(req.Method, req.URL, req.SignedHeader, s.clock.Now().Add(ttl)), nil
}

// PresignGet implements Store.
func (s *S3) PresignGet(ctx context.Context, key string, ttl time.Duration) (Signed, error) {
	ttl = clampTTL(ttl)
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(key)},
		s3.WithPresignExpires(ttl))
	if err != nil {
		return Signed{}, fmt.Errorf("presign log get: %w", err)
	}
	return signed(req.Method, req.URL, req.SignedHeader, s.clock.Now().Add(ttl)), nil
}

// Head implements Store. Errors name the operation, never the key's URL.
func (s *S3) Head(ctx context.Context, key string) (Object, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(key), ChecksumMode: "ENABLED"})
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && (ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "NoSuchKey") {
			return Object{}, ErrObjectMissing
		}
		return Object{}, fmt.Errorf("head log object: %s", errorCode(err))
	}
	o := Object{Size: aws.ToInt64(out.ContentLength)}
	if c := aws.ToString(out.ChecksumSHA256); c != "" {
		// A full-object checksum is plain base64; a composite one
		// ("…-N") is not the body's SHA-256 and is ignored.
		if b, err := base64.StdEncoding.DecodeString(c); err == nil && len(b) == 32 {
			o.SHA256 = b
		}
	}
	return o, nil
}

// Digest implements Store with one GET. The SHA-256 is computed here, from
// the bytes the store returns: S3-compatible stores differ in whether they
// check or keep an x-amz-checksum-sha256 (docs/operations.md, "Logs").
func (s *S3) Digest(ctx context.Context, key string, limit int64) (Object, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(key)})
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && (ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "NoSuchKey") {
			return Object{}, ErrObjectMissing
		}
		return Object{}, fmt.Errorf("get log object: %s", errorCode(err))
	}
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); n > limit {
		return Object{Size: n}, nil // not read: it cannot be the chunk
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(out.Body, limit+1))
	if err != nil {
		return Object{}, fmt.Errorf("read log object: %s", errorCode(err))
	}
	if n > limit {
		return Object{Size: n}, nil
	}
	return Object{Size: n, SHA256: h.Sum(nil)}, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(key)}); err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && (ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "NoSuchKey") {
			return nil
		}
		return fmt.Errorf("delete log object: %s", errorCode(err))
	}
	return nil
}

// errorCode reduces an SDK error to its API code (or "request failed"):
// SDK errors carry the request URL, which names the bucket and key.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "timed out"
	}
	return "request failed"
}
