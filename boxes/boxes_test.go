package boxes_test

import (
	"errors"
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
