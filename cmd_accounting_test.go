package main

import (
	"testing"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
)

// cliExempt lists operations without a friendly command of their own, each
// with the reason. `chalupa admin api <operationId>` reaches all of them.
var cliExempt = map[string]string{}

// TestEveryOperationHasACommand is the CLI side of the operation accounting
// (Coder's dbauthz rule): every operation of the table is called by exactly
// one command of `chalupa admin` (an opCommand) or is exempt with a reason,
// and no command names an operation the table lacks. The server side is
// daemon's TestEveryOperationIsServed and the client side adminapi's
// TestClientMethods.
func TestEveryOperationHasACommand(t *testing.T) {
	var c cli
	parser, err := newParser(&c)
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
