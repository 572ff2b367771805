package boxes_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/boxes"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

func TestValidSource(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"203.0.113.7/32", true},
		{"10.1.2.3/32", true}, // a private egress (a VPC NAT) is the operator's call
		{"203.0.113.7", false},
		{"203.0.113.0/24", false},
		{"203.0.113.7/32 ", false},
		{"203.000.113.7/32", false},
		{"::ffff:203.0.113.7/128", false},
		{"2001:db8::1/128", false},
		{"0.0.0.0/32", false},
		{"127.0.0.1/32", false},
		{"169.254.1.1/32", false},
		{"224.0.0.1/32", false},
		{"255.255.255.255/32", false},
		{"", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			err := boxes.ValidSource("customerSource", tc.in)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, boxes.ErrInvalid)) {
				t.Fatalf("ValidSource(%q) = %v, want ok %v", tc.in, err, tc.ok)
			}
		})
	}
}

// netipSource is ValidSource's rule as net/netip states it, the oracle
// the two patterns are held to: a canonical IPv4 /32 of a unicast address.
func netipSource(s string) bool {
	p, err := netip.ParsePrefix(s)
	return err == nil && p.Addr().Is4() && p.Bits() == 32 && p.String() == s && p.Addr().IsGlobalUnicast()
}

// TestSourcePatternsAreNetip: ValidSource (the schema's ipv4Host and
// nonUnicastHost patterns) accepts exactly what net/netip's reading
// accepts: every octet value (and its leading-zero forms) in each of the
// four places, every first octet beside edge values of the others, every
// second octet after the first octets the ranges name, and malformed
// forms.
func TestSourcePatternsAreNetip(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := boxes.ValidSource("customerSource", s) == nil, netipSource(s); got != want {
			t.Fatalf("%q: ValidSource accepts %v, net/netip %v", s, got, want)
		}
	}
	for place := range 4 {
		for v := range 256 {
			for _, form := range []string{"%d", "0%d", "00%d"} {
				o := []string{"1", "1", "1", "1"}
				o[place] = fmt.Sprintf(form, v)
				check(strings.Join(o, ".") + "/32")
			}
		}
	}
	edges := []int{0, 1, 9, 10, 99, 100, 126, 127, 128, 168, 169, 170, 199, 200, 223, 224, 239, 240, 249, 250, 253, 254, 255}
	for a := range 256 {
		for _, b := range edges {
			for _, c := range []int{0, 255} {
				for _, d := range []int{0, 1, 254, 255} {
					check(fmt.Sprintf("%d.%d.%d.%d/32", a, b, c, d))
				}
			}
		}
	}
	for _, a := range []int{0, 127, 169, 223, 224, 239, 240, 255} {
		for b := range 256 {
			check(fmt.Sprintf("%d.%d.0.0/32", a, b))
			check(fmt.Sprintf("%d.%d.255.255/32", a, b))
		}
	}
	for _, s := range []string{"", "1.2.3.4", "1.2.3.4/31", "1.2.3.4/032", "01.2.3.4/32", "1.2.3.04/32", "256.1.1.1/32",
		"1.2.3/32", "1.2.3.4.5/32", " 1.2.3.4/32", "1.2.3.4/32\n", "::ffff:1.2.3.4/128", "::/0", "0.0.0.0/0",
		"1.2.3.4/ 32", "1.2.3.4/+32", "1.2.3.4/32/32", "１.2.3.4/32"} {
		check(s)
	}
}

// TestReservedTagPatternIsThePrefix: the reservedTag pattern matches a
// tag exactly when it starts with ReservedTagPrefix in any case, over
// every case of the prefix and near misses.
func TestReservedTagPatternIsThePrefix(t *testing.T) {
	p := boxes.ReservedTagPrefix
	var tags []string
	for mask := range 1 << len(p) {
		b := []byte(p)
		for i := range b {
			if mask&(1<<i) != 0 {
				b[i] -= 'a' - 'A'
			}
		}
		tags = append(tags, string(b), string(b)+":env:x", string(b[:len(b)-1]), "x"+string(b), string(b[:3])+"_"+string(b[3:]))
	}
	for _, tag := range tags {
		t.Run(tag, func(t *testing.T) {
			base := boxes.WithDefaults(storage.BoxConfig{Region: "ams3", Size: "s-1vcpu-1gb", Image: "ubuntu-24-04-x64",
				SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
				CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", Tags: []string{tag}})
			refused := boxes.Validate(base) != nil
			if want := strings.HasPrefix(strings.ToLower(tag), p); refused != want {
				t.Fatalf("%q refused %v; starts with %q in some case: %v", tag, refused, p, want)
			}
		})
	}
}

func TestValidateAcceptsAFullBox(t *testing.T) {
	c := storage.BoxConfig{Region: "ams3", Size: "gpu-h100x1-80gb", Image: "123456789",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa", "00:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: 0, Tags: []string{"team:ml", "cost_center-7"}, AgentIdleMinutes: 30}
	if err := boxes.Validate(c); err != nil {
		t.Fatal(err)
	}
	c.Tags = []string{"Chalupa-x"}
	if err := boxes.Validate(c); !errors.Is(err, boxes.ErrInvalid) {
		t.Fatalf("a reserved tag in another case passed: %v", err)
	}
}

// TestAgentLimits: a box's agent limits are the agent's and the
// heartbeat's (docs/operations.md, "Boxes"): the idle limit defaults to the
// agent's own default and is bounded by the heartbeat's limit, the session
// limit is none by default and at most 30 days.
func TestAgentLimits(t *testing.T) {
	if boxes.DefaultAgentIdleMinutes != agent.DefaultLimitMinutes || boxes.MaxAgentIdleMinutes != protocol.MaxLimitMinutes {
		t.Fatalf("box idle limits %d/%d, agent default %d, heartbeat bound %d", boxes.DefaultAgentIdleMinutes,
			boxes.MaxAgentIdleMinutes, agent.DefaultLimitMinutes, protocol.MaxLimitMinutes)
	}
	base := boxes.WithDefaults(storage.BoxConfig{Region: "ams3", Size: "s-1vcpu-1gb", Image: "ubuntu-24-04-x64",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32"})
	if base.AgentIdleMinutes != 30 || base.AgentSessionMinutes != 0 {
		t.Fatalf("defaults: idle %d, session %d; want 30 and 0", base.AgentIdleMinutes, base.AgentSessionMinutes)
	}
	for _, tc := range []struct {
		name          string
		idle, session int64
		field         string // "" when valid
	}{
		{"defaults", 30, 0, ""},
		{"a week idle, 30 days session", 10080, 43200, ""},
		{"one minute idle", 1, 1, ""},
		{"no idle limit", 0, 0, "agentIdleMinutes"},
		{"idle over a week", 10081, 0, "agentIdleMinutes"},
		{"negative session", 30, -1, "agentSessionMinutes"},
		{"session over 30 days", 30, 43201, "agentSessionMinutes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.AgentIdleMinutes, c.AgentSessionMinutes = tc.idle, tc.session
			err := boxes.Validate(c)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, boxes.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}
