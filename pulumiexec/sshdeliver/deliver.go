package sshdeliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/internal/lazyre"
	"github.com/chalupa-run/chalupa/storage"
)

// Defaults (docs/operations.md, "SSH key delivery").
const (
	// DefaultWait bounds how long Deliver waits for the droplet's SSH to
	// answer: a droplet is active in about a minute and sshd follows within
	// seconds, so five minutes of silence means the firewall drops us.
	DefaultWait = 5 * time.Minute
	// DefaultRetry is the pause between two connection attempts while
	// waiting.
	DefaultRetry = 5 * time.Second
	// DefaultAttemptTimeout bounds one TCP connect plus SSH handshake and
	// one file write: a firewall that drops packets would otherwise hold an
	// attempt until the kernel gives up (minutes).
	DefaultAttemptTimeout = 20 * time.Second
	// DefaultUser is the login user: DigitalOcean images accept the
	// droplet's SSH keys for root.
	DefaultUser = "root"
	// DefaultDir is where the agent waits for its key (docs/operations.md,
	// "Agent install").
	DefaultDir = "/etc/chalupa-agent"
	// DefaultOwner owns the delivered files once the agent's user exists
	// (the install script chowns the directory when it creates the user).
	DefaultOwner = "chalupa-agent"
)

// Errors.
var (
	// ErrUnreachable: the droplet's SSH did not answer within the wait,
	// or the caller's context ended while waiting (the error then wraps
	// its context error too).
	ErrUnreachable = errors.New("the droplet's SSH did not come up")
	// ErrHostKeyChanged: the droplet presented a host key other than the
	// one pinned at first contact; nothing was sent.
	ErrHostKeyChanged = errors.New("the droplet's SSH host key changed since it was pinned")
	// ErrAuth: the droplet refused chalupa's SSH identity.
	ErrAuth = errors.New("the droplet refused chalupa's SSH identity")
	// ErrWrite: a remote file write failed.
	ErrWrite = errors.New("writing the agent's key files over SSH failed")
	// ErrBadFiles: Files is incomplete or malformed.
	ErrBadFiles = errors.New("the key files to deliver are incomplete")
)

// Files are what Deliver writes: the agent's key id and key material (the
// contents of key-id and ingest.key, each followed by a newline as
// `chalupa admin keys issue --out` writes them).
type Files struct {
	KeyID string
	Key   []byte
}

// Deliverer writes agent key files to droplets. It holds only the master-key
// sealer (to open its identity) and the database (identity and pinned host
// keys); no DigitalOcean token.
type Deliverer struct {
	db     *storage.DB
	sealer *envelope.Sealer
	clock  clockwork.Clock

	// User, Dir and Owner default to DefaultUser, DefaultDir, DefaultOwner.
	User, Dir, Owner string
	// Wait, Retry and AttemptTimeout default to DefaultWait, DefaultRetry,
	// DefaultAttemptTimeout.
	Wait, Retry, AttemptTimeout time.Duration
	// UpgradeWait bounds UpgradeAgent's wait for SSH; 0 is UpgradeWait.
	UpgradeWait time.Duration
	// Dial connects to the droplet; nil means a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New returns a Deliverer with the defaults. clock paces the wait for SSH
// and stamps host-key pins; nil means the real clock.
func New(db *storage.DB, sealer *envelope.Sealer, clock clockwork.Clock) *Deliverer {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Deliverer{db: db, sealer: sealer, clock: clock,
		User: DefaultUser, Dir: DefaultDir, Owner: DefaultOwner,
		Wait: DefaultWait, Retry: DefaultRetry, AttemptTimeout: DefaultAttemptTimeout}
}

// Result says what Deliver did.
type Result struct {
	// Attempts is how many connections were tried.
	Attempts int
	// HostKeyFingerprint is the droplet's host key (SHA256 form), pinned.
	HostKeyFingerprint string
	// FirstContact is true when this delivery pinned the host key.
	FirstContact bool
}

// safeName is what Dir, Owner and User may hold: they are placed in a
// remote shell command.
var safeName = lazyre.New(`^[A-Za-z0-9/._-]+$`)

// Deliver writes key-id then ingest.key (both mode 0600, owned by Owner when
// that user exists) into Dir on the droplet at addr (host:port) over SSH.
// It waits up to Wait for SSH to answer; on first contact it pins the
// droplet's host key under dropletID, later it refuses any other key.
//
// Errors: ErrBadFiles; ErrUnreachable (the message says the droplet is
// still billable: a missing or wrong control-plane firewall source looks
// like this); ErrHostKeyChanged; ErrAuth; ErrWrite; storage.ErrNotFound
// when no identity exists (EnsureIdentity first); ErrIdentityCorrupt.
// Errors never carry the key material or the address.
func (d *Deliverer) Deliver(ctx context.Context, addr string, dropletID int64, f Files) (Result, error) {
	var res Result
	if f.KeyID == "" || len(f.Key) == 0 || !safeName.MatchString(f.KeyID) || bytes.ContainsAny(f.Key, "\n\r") {
		return res, ErrBadFiles
	}
	for _, s := range []string{d.User, d.Dir, d.Owner} {
		if !safeName.MatchString(s) {
			return res, fmt.Errorf("sshdeliver: user, directory and owner must match %s", safeName)
		}
	}
	signer, err := Signer(ctx, d.db.Read, d.sealer)
	if err != nil {
		return res, err
	}
	deadline := d.clock.Now().Add(d.Wait)
	var last error
	for {
		res.Attempts++
		client, pinned, err := d.connect(ctx, addr, dropletID, signer, &res)
		if err == nil {
			res.FirstContact = pinned
			defer client.Close()
			return res, d.writeFiles(ctx, client, dropletID, f)
		}
		if retryable(err) && ctx.Err() != nil {
			// Cancelled mid-attempt: the net error names the address.
			return res, fmt.Errorf("%w on droplet %d: %w while waiting for SSH (%s)", ErrUnreachable, dropletID, ctx.Err(), errKind(err))
		}
		if !retryable(err) {
			return res, err
		}
		last = err
		if !d.clock.Now().Before(deadline) {
			return res, fmt.Errorf("%w within %s on droplet %d (%d attempts; last: %v): a missing or wrong control-plane source in the box's firewall looks like this; the droplet is still running and billable",
				ErrUnreachable, d.Wait, dropletID, res.Attempts, errKind(last))
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-d.clock.After(d.Retry):
		}
	}
}

// connect dials, handshakes (pinning the host key) and writes the files.
func (d *Deliverer) connect(ctx context.Context, addr string, dropletID int64, signer ssh.Signer, res *Result) (*ssh.Client, bool, error) {
	actx, cancel := context.WithTimeout(ctx, d.AttemptTimeout)
	defer cancel()
	dial := d.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(actx, "tcp", addr)
	if err != nil {
		return nil, false, unreachable{err}
	}
	stop := context.AfterFunc(actx, func() { conn.Close() })
	defer stop()

	var pinErr error
	firstContact, sawKey := false, false
	cfg := &ssh.ClientConfig{
		User: d.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			sawKey = true
			pin := storage.SSHHostKey{DropletID: dropletID, HostKey: authorizedLine(key), Fingerprint: ssh.FingerprintSHA256(key)}
			pinErr = d.db.Writer.Do(ctx, func(tx storage.Tx) error {
				_, err := storage.SSHHostKeyByDroplet(ctx, tx, dropletID)
				firstContact = errors.Is(err, storage.ErrNotFound)
				return storage.PinSSHHostKey(ctx, tx, pin, d.clock.Now())
			})
			if pinErr == nil {
				res.HostKeyFingerprint = pin.Fingerprint
			}
			return pinErr
		},
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		switch {
		case errors.Is(pinErr, storage.ErrHostKeyMismatch):
			return nil, false, fmt.Errorf("%w (droplet %d): refusing to deliver the ingest key", ErrHostKeyChanged, dropletID)
		case pinErr != nil:
			return nil, false, pinErr
		case sawKey:
			return nil, false, fmt.Errorf("%w on droplet %d: is its public key (chalupa admin ssh-key) among the box's SSH keys?", ErrAuth, dropletID)
		}
		return nil, false, unreachable{err}
	}
	return ssh.NewClient(c, chans, reqs), firstContact, nil
}

// writeFiles writes key-id then ingest.key: the agent waits for ingest.key,
// so the pair is whole once ingest.key appears.
func (d *Deliverer) writeFiles(ctx context.Context, client *ssh.Client, dropletID int64, f Files) error {
	for _, w := range []struct {
		name string
		body []byte
	}{
		{"key-id", []byte(f.KeyID + "\n")},
		{"ingest.key", append(append([]byte(nil), f.Key...), '\n')},
	} {
		if err := d.writeFile(ctx, client, w.name, w.body); err != nil {
			var ee *ssh.ExitError
			if errors.As(err, &ee) {
				// The remote command's own words (its stderr): a path
				// and a reason, never the key, which only travels on
				// stdin.
				return fmt.Errorf("%w (%s on droplet %d): %v", ErrWrite, w.name, dropletID, err)
			}
			return fmt.Errorf("%w (%s on droplet %d): %v", ErrWrite, w.name, dropletID, errKind(err))
		}
	}
	return nil
}

// writeFile runs WriteCommand for name with body on stdin, bounded by
// AttemptTimeout.
func (d *Deliverer) writeFile(ctx context.Context, client *ssh.Client, name string, body []byte) error {
	sess, err := client.NewSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	sess.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	sess.Stderr = &stderr
	done := make(chan error, 1)
	go func() { done <- sess.Run(WriteCommand(d.Dir, name, d.Owner)) }()
	wctx, cancel := context.WithTimeout(ctx, d.AttemptTimeout)
	defer cancel()
	select {
	case err := <-done:
		if err != nil && stderr.Len() > 0 {
			msg := bytes.TrimSpace(stderr.Bytes())
			if len(msg) > maxStderr {
				msg = msg[:maxStderr]
			}
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	case <-wctx.Done():
		client.Close()
		return wctx.Err()
	}
}

// WriteCommand is the remote command that writes stdin to dir/name with
// mode 0600 (docs/operations.md, "SSH key delivery"): it creates dir
// (0700) if needed, writes a temporary file under umask 077, hands it to
// owner when that user exists (cloud-init may still be creating it; the
// install script chowns the directory afterwards), and renames it into
// place, so the agent never reads a half-written file. dir, name and owner
// must match safeName (no quoting needed, none possible to break).
func WriteCommand(dir, name, owner string) string {
	tmp := dir + "/." + name + ".tmp"
	return "set -eu; umask 077; install -d -m 0700 " + dir +
		"; cat > " + tmp + "; chmod 0600 " + tmp +
		"; if id " + owner + " >/dev/null 2>&1; then chown " + owner + ": " + tmp + "; fi; mv -f " + tmp + " " + dir + "/" + name
}

// maxStderr bounds how much of the remote command's stderr an error
// carries, in bytes.
const maxStderr = 200

// unreachable marks an error as "SSH is not up yet": worth another attempt.
// Its text is the failure's kind only (errKind): the net error it wraps
// names the address, which no error may carry (docs/operations.md, "SSH
// key delivery").
type unreachable struct{ err error }

func (u unreachable) Error() string { return errKind(u.err) }
func (u unreachable) Unwrap() error { return u.err }

func retryable(err error) bool {
	var u unreachable
	return errors.As(err, &u)
}

// errKind reduces a network error to its kind, so no address reaches a
// job's error text.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return "connection closed during the SSH handshake"
	}
	return "connection failed"
}
