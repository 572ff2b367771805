// Package origin holds the rules for the addresses chalupa sends secrets to
// or listens on: what counts as loopback, and what a daemon URL given to a
// client command may be (docs/operations.md, "Configuration").
package origin

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// IsLoopbackHost reports whether host (no port; brackets allowed) is
// localhost or a loopback IP address: 127.0.0.0/8, ::1, or 127/8 mapped into
// IPv6. An empty host (every interface) is not loopback.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// CheckDaemonURL holds a daemon URL given to a client command as flag to
// these rules, since what it sends (carries, e.g. "the admin token") must
// not cross a network in clear text or end up somewhere else: an origin
// (scheme://HOST[:PORT], no path, query or fragment: the client appends
// the operation's path), no user info (a second credential the daemon
// ignores, which would end up in error messages), and https unless the host
// is loopback. The messages never repeat the URL, which may hold a password.
func CheckDaemonURL(flag, carries, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%s must be http://HOST[:PORT] or https://HOST[:PORT]", flag)
	}
	if u.User != nil {
		return fmt.Errorf("%s must not hold user info (user:password@)", flag)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return fmt.Errorf("%s must be the daemon's origin, scheme://HOST[:PORT], with no path, query or fragment", flag)
	}
	if u.Scheme == "http" && !IsLoopbackHost(u.Hostname()) {
		return fmt.Errorf("refusing to send %s over plain http to %s: use https, or http only to a loopback address (127.0.0.0/8, ::1, localhost)", carries, u.Hostname())
	}
	return nil
}
