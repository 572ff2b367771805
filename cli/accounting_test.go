package cli

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// cliExempt lists operations without a friendly command of their own, each
// with the reason. `chalupa admin api <operationId>` reaches all of them.
var cliExempt = map[string]string{
	adminapi.OpClearSessionPolicy: "`chalupa admin env policy SLUG --clear` calls it: a flag of the set command, not a command of its own",
	adminapi.OpStartAgentRollout:  "`chalupa admin reroll --action upgrade-agent` starts and follows it: reroll calls several operations, so it is not an opCommand",
	adminapi.OpCheckTokens:        "`chalupa admin status --check-tokens` calls it: a flag of the status command, not a command of its own",
}

// TestEveryOperationHasACommand is the CLI side of the operation accounting
// (Coder's dbauthz rule): every operation of the table is called by exactly
// one command of `chalupa admin` (an opCommand) or is exempt with a reason,
// and no command names an operation the table lacks. The server side is
// daemon's TestEveryOperationIsServed and the client side adminapi's
// TestClientMethods.
func TestEveryOperationHasACommand(t *testing.T) {
	var r root
	parser, err := newParser(&r, &Env{LookupEnv: noEnv}, Wiring{})
	if err != nil {
		t.Fatal(err)
	}
	commands := map[string][]string{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		if n.Type == kong.CommandNode && n.Target.IsValid() && n.Target.CanAddr() {
			if oc, ok := n.Target.Addr().Interface().(opCommand); ok {
				commands[oc.operation()] = append(commands[oc.operation()], n.FullPath())
			}
		}
		for _, ch := range n.Children {
			walk(ch)
		}
	}
	walk(parser.Model.Node)
	for _, op := range adminapi.Operations {
		t.Run(op.ID, func(t *testing.T) {
			cmds, reason := commands[op.ID], cliExempt[op.ID]
			switch {
			case len(cmds) == 0 && reason == "":
				t.Errorf("no `chalupa admin` command calls %s; add one (an opCommand) or exempt it with a reason", op.ID)
			case len(cmds) > 0 && reason != "":
				t.Errorf("%s is exempt (%s) but %v call it", op.ID, reason, cmds)
			case len(cmds) > 1:
				t.Errorf("%s is called by several commands: %v", op.ID, cmds)
			}
			if len(cmds) == 1 {
				t.Logf("%s: %s", op.ID, cmds[0])
			}
		})
		delete(commands, op.ID)
	}
	for id, cmds := range commands {
		t.Errorf("%v call %s, which is not in the operation table", cmds, id)
	}
	for id := range cliExempt {
		if _, ok := adminapi.Lookup(id); !ok {
			t.Errorf("exemption for unknown operation %s", id)
		}
	}
}

// secretOperations set or return a secret: the console password, a
// provider token, a fresh ingest key, a presigned URL (a credential for
// the object for its lifetime). Their MCP policy must be never.
var secretOperations = []string{adminapi.OpSetConsolePassword, adminapi.OpSetProviderToken, adminapi.OpIssueIngestKey, adminapi.OpRotateIngestKey,
	adminapi.OpGetLogDownload}

// secretFields are JSON fields that carry a secret: in a request
// (password, token) or a response (keyMaterial). An operation with one is
// never exposed over MCP, whether or not it is listed above.
var secretFields = map[string]bool{"password": true, "token": true, "keyMaterial": true}

// TestEveryOperationHasAnMCPPolicy is the MCP side of the operation
// accounting (docs/operations.md, "MCP server"): every operation has a
// policy; reads are exactly the operations that do not mutate; a
// destructive policy has a confirmation template whose every {name} is an
// argument of the tool and a never policy a reason (and neither has the
// other's); everything that sets or returns a secret is never; tool names
// are unique and in the chalupa_admin_ style.
func TestEveryOperationHasAnMCPPolicy(t *testing.T) {
	tools := map[string]mcpserver.Tool{}
	for _, tl := range mcpserver.Tools(adminapi.Operations) {
		tools[tl.Op.ID] = tl
	}
	names := map[string]string{}
	nameRE := regexp.MustCompile(`^chalupa_admin_[a-z0-9_]+$`)
	for _, op := range adminapi.Operations {
		t.Run(op.ID, func(t *testing.T) {
			p := op.MCP
			switch p.Access {
			case adminapi.MCPRead, adminapi.MCPMutate, adminapi.MCPDestructive, adminapi.MCPNever:
			default:
				t.Fatalf("no MCP policy (read, mutate, destructive or never)")
			}
			if p.Access != adminapi.MCPNever && (p.Access == adminapi.MCPRead) == op.Mutates {
				t.Errorf("policy %s but Mutates %v: of the exposed operations, read is for exactly those that do not mutate", p.Access, op.Mutates)
			}
			if (p.Confirm != "") != (p.Access == adminapi.MCPDestructive) {
				t.Errorf("policy %s with confirmation %q: destructive operations, and only they, have one", p.Access, p.Confirm)
			}
			if (p.Reason != "") != (p.Access == adminapi.MCPNever) {
				t.Errorf("policy %s with reason %q: never operations, and only they, have one", p.Access, p.Reason)
			}
			secret := slices.Contains(secretOperations, op.ID)
			for _, typ := range []reflect.Type{op.Request, op.Response} {
				if typ == nil {
					continue
				}
				for _, f := range apischema.Fields(typ) {
					secret = secret || secretFields[f.Name]
				}
			}
			if secret && p.Access != adminapi.MCPNever {
				t.Errorf("sets or returns a secret but its MCP policy is %s; want never", p.Access)
			}
			tl, exposed := tools[op.ID]
			if exposed != (p.Access != adminapi.MCPNever) {
				t.Fatalf("exposed %v with policy %s", exposed, p.Access)
			}
			if !exposed {
				return
			}
			if !nameRE.MatchString(tl.Name) {
				t.Errorf("tool name %q is not chalupa_admin_<snake_case>", tl.Name)
			}
			if other, dup := names[tl.Name]; dup {
				t.Errorf("tool name %s is also %s's", tl.Name, other)
			}
			names[tl.Name] = op.ID
			props := tl.Input["properties"].(apischema.Schema)
			for _, ph := range mcpserver.Placeholders(p.Confirm) {
				top, _, _ := strings.Cut(ph, ".")
				if _, ok := props[top]; !ok || top == mcpserver.ConfirmArg {
					t.Errorf("confirmation %q names {%s}, which is not an argument of %s", p.Confirm, ph, tl.Name)
				}
			}
			if p.Access == adminapi.MCPDestructive && len(mcpserver.Placeholders(p.Confirm)) == 0 {
				t.Errorf("confirmation %q names nothing the call targets", p.Confirm)
			}
			t.Logf("%s: %s %s", op.ID, p.Access, tl.Name)
		})
	}
}
