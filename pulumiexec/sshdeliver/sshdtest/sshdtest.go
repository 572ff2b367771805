// Package sshdtest is a local SSH server standing in for a droplet's sshd in
// tests of converge's key delivery (docs/operations.md, "SSH key
// delivery") and of agent upgrades: it accepts one authorized public key,
// presents a given host key, and runs each exec request with sh -c, its
// stdin from the client, as the droplet's root would, the agent's paths
// moved under Root.
package sshdtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
)

// Server is a running test SSH server. Create it with New.
type Server struct {
	// Addr is its loopback address (host:port).
	Addr string
	// Root, when set, is the fake droplet's file system for the agent's
	// directory: sshdeliver.DefaultDir in a command is rewritten to
	// Root + sshdeliver.DefaultDir before it runs.
	Root string
	// Path, when set, are directories put before PATH for the commands
	// (fake systemctl and the like; the real curl, tar and sha256sum stay
	// reachable after them).
	Path []string

	mu         sync.Mutex
	commands   []string
	authorized ssh.PublicKey
}

// New starts a server on a loopback port presenting hostKey and accepting
// only authorized (nil: nobody until Authorize); it stops when the test
// ends.
func New(t testing.TB, hostKey ssh.Signer, authorized ssh.PublicKey) *Server {
	t.Helper()
	return NewAt(t, "127.0.0.1:0", hostKey, authorized)
}

// NewAt is New listening on addr (host:port): droplets of one test at
// their own loopback addresses (127.0.0.2, …) on the one SSH port the
// daemon dials (CHALUPA_SSH_PORT).
func NewAt(t testing.TB, addr string, hostKey ssh.Signer, authorized ssh.PublicKey) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: ln.Addr().String(), authorized: authorized}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			s.mu.Lock()
			ok := s.authorized != nil && bytes.Equal(k.Marshal(), s.authorized.Marshal())
			s.mu.Unlock()
			if ok {
				return nil, nil
			}
			return nil, errors.New("unauthorized")
		},
	}
	cfg.AddHostKey(hostKey)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c, cfg)
		}
	}()
	return s
}

// Authorize makes k the one public key the server accepts (the droplet's
// authorized_keys, as the box's SSH keys install it).
func (s *Server) Authorize(k ssh.PublicKey) {
	s.mu.Lock()
	s.authorized = k
	s.mu.Unlock()
}

// Port is the server's TCP port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Ran returns the commands received so far, as the client sent them.
func (s *Server) Ran() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

// agentBinDir is the directory of sshdeliver.AgentBinary: rewritten under
// Root like the agent's directory.
var agentBinDir = filepath.Dir(sshdeliver.AgentBinary)

// AgentBinary is where an upgrade puts the agent: Root +
// sshdeliver.AgentBinary.
func (s *Server) AgentBinary() string { return filepath.Join(s.Root, sshdeliver.AgentBinary) }

// AgentDir is where the delivered files land: Root + sshdeliver.DefaultDir.
func (s *Server) AgentDir() string { return filepath.Join(s.Root, sshdeliver.DefaultDir) }

func (s *Server) serve(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, creqs)
	}
}

func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" || len(req.Payload) < 4 {
			_ = req.Reply(false, nil)
			continue
		}
		n := binary.BigEndian.Uint32(req.Payload)
		command := string(req.Payload[4 : 4+n])
		_ = req.Reply(true, nil)
		s.mu.Lock()
		s.commands = append(s.commands, command)
		s.mu.Unlock()
		if s.Root != "" {
			command = strings.ReplaceAll(command, sshdeliver.DefaultDir, s.AgentDir())
			command = strings.ReplaceAll(command, agentBinDir, filepath.Join(s.Root, agentBinDir))
		}
		cmd := exec.Command("sh", "-c", command)
		if len(s.Path) > 0 {
			cmd.Env = append(os.Environ(), "PATH="+strings.Join(s.Path, string(os.PathListSeparator))+string(os.PathListSeparator)+os.Getenv("PATH"))
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			status = 1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = uint32(ee.ExitCode())
			}
		}
		_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
		return
	}
}

// NewSigner returns a fresh ed25519 SSH signer (a host key).
func NewSigner(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Authorized parses an authorized_keys line (chalupa admin ssh-key's
// answer). It fails the test on a malformed line.
func Authorized(t testing.TB, line string) ssh.PublicKey {
	t.Helper()
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatalf("parse the SSH public key: %v", err)
	}
	return k
}
