package console

import (
	"errors"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// Source returns the address a login attempt is counted against
// (docs/operations.md, "Console"): the connection's address, or, when that
// is one of the trusted proxies, the right-most X-Forwarded-For address
// that is not itself a trusted proxy. Without trusted proxies
// X-Forwarded-For is ignored.
func Source(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap()
	if !isTrusted(addr, trusted) {
		return addr.String()
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		a = a.Unmap()
		if !isTrusted(a, trusted) {
			return a.String()
		}
	}
	return addr.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies parses CHALUPA_TRUSTED_PROXIES: comma-separated IP
// addresses or CIDR prefixes. Errors: the first entry that is neither.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, errors.New("not an IP address or CIDR prefix")
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// lockedUntil returns when the limit stops refusing source's attempts, or
// the zero time when it does not refuse them now.
func (c *Console) lockedUntil(r *http.Request, source string, now time.Time) (time.Time, error) {
	since := now.Add(-LoginWindow)
	var until time.Time
	for _, b := range []struct {
		source string
		limit  int
	}{{source, LoginFailuresPerSource}, {"", LoginFailuresFleet}} {
		times, err := storage.LoginFailureTimes(r.Context(), c.d.DB.Read, b.source, since, 4*b.limit)
		if err != nil {
			return time.Time{}, err
		}
		if n := len(times); n >= b.limit {
			// The bound holds until enough failures leave the window
			// that fewer than limit remain.
			if t := times[n-b.limit].Add(LoginWindow); t.After(until) {
				until = t
			}
		}
	}
	return until, nil
}

// login checks one sign-in attempt.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return
	}
	ck, _ := r.Cookie(loginCSRFCookie)
	if !c.sameOrigin(r) || ck == nil || !tokenEqual(ck.Value, r.PostForm.Get(csrfField)) {
		c.fail(w, r, http.StatusForbidden, "Refused", "This form was not sent from this console's own login page. Reload the login page and try again.")
		return
	}
	source := Source(r, c.d.TrustedProxies)
	ctx := r.Context()

	c.loginMu.Lock()
	defer c.loginMu.Unlock()
	now := c.d.Clock.Now()
	until, err := c.lockedUntil(r, source, now)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	if !until.IsZero() {
		secs := int(math.Ceil(until.Sub(now).Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		c.render(w, r, http.StatusTooManyRequests, "login", loginView{
			CSRF:  c.loginCSRF(w, r),
			Error: "Too many failed sign-ins. Wait " + (time.Duration(max(secs, 1)) * time.Second).String() + " before trying again.",
		})
		return
	}
	hash, err := storage.ConsolePasswordHash(ctx, c.d.DB.Read)
	noPassword := errors.Is(err, storage.ErrNotFound)
	if err != nil && !noPassword {
		c.internal(w, r, err)
		return
	}
	if noPassword {
		hash = dummyHash()
	}
	if ok := VerifyPassword(hash, r.PostForm.Get("password")); !ok || noPassword {
		err := c.d.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			if err := storage.InsertLoginFailure(ctx, tx, source, now); err != nil {
				return err
			}
			_, err := storage.PruneLoginFailures(ctx, tx, now.Add(-LoginWindow), failurePruneLimit)
			return err
		})
		if err != nil {
			c.internal(w, r, err)
			return
		}
		msg := "Wrong password."
		if noPassword {
			msg = "No console password is set: run `chalupa admin password` on the server."
		}
		c.render(w, r, http.StatusUnauthorized, "login", loginView{CSRF: c.loginCSRF(w, r), Error: msg})
		return
	}
	id := newToken()
	s := storage.ConsoleSession{IDHash: hashID(id), CSRFToken: newToken(), CreatedAt: now, LastSeenAt: now}
	err = c.d.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		if err := storage.InsertConsoleSession(ctx, tx, s); err != nil {
			return err
		}
		_, err := storage.PruneConsoleSessions(ctx, tx, now.Add(-SessionAbsoluteTimeout), now.Add(-SessionIdleTimeout), sessionPruneLimit)
		return err
	})
	if err != nil {
		c.internal(w, r, err)
		return
	}
	c.setCookie(w, c.cookie, id, 0)
	c.setCookie(w, loginCSRFCookie, "", -1)
	http.Redirect(w, r, "/app", http.StatusSeeOther)
}

// logout ends the request's session.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	s := sessionOf(r)
	if err := r.ParseForm(); err != nil || !c.sameOrigin(r) || !tokenEqual(s.CSRFToken, r.PostForm.Get(csrfField)) {
		c.fail(w, r, http.StatusForbidden, "Refused", "This form was not sent from this console. Reload the page and try again.")
		return
	}
	ctx := r.Context()
	if err := c.d.DB.Writer.Do(ctx, func(tx storage.Tx) error { return storage.DeleteConsoleSession(ctx, tx, s.IDHash) }); err != nil {
		c.internal(w, r, err)
		return
	}
	c.setCookie(w, c.cookie, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// loginCSRF returns the login form's token, setting its cookie when the
// browser has none (a double-submit token: no session exists yet).
func (c *Console) loginCSRF(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(loginCSRFCookie); err == nil && len(ck.Value) >= 32 && len(ck.Value) <= 64 {
		return ck.Value
	}
	t := newToken()
	c.setCookie(w, loginCSRFCookie, t, 0)
	return t
}

type loginView struct {
	CSRF, Error string
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.currentSession(r); ok {
		http.Redirect(w, r, "/app", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", loginView{CSRF: c.loginCSRF(w, r)})
}
