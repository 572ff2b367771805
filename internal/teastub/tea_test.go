package tea

import (
	"errors"
	"testing"
)

// TestKeyString: keys are named as Bubble Tea names them, which the
// bindings of the Pulumi prompt compare against.
func TestKeyString(t *testing.T) {
	for _, c := range []struct {
		k    KeyMsg
		want string
	}{
		{KeyMsg{Type: KeyEnter}, "enter"},
		{KeyMsg{Type: KeyCtrlC}, "ctrl+c"},
		{KeyMsg{Type: KeyRunes, Runes: []rune("a"), Alt: true}, "alt+a"},
		{KeyMsg{Type: KeyRunes, Runes: []rune("ab"), Paste: true}, "[ab]"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if got := c.k.String(); got != c.want {
				t.Errorf("String = %q, want %q", got, c.want)
			}
		})
	}
}

type model struct{}

func (model) Init() Cmd                 { return nil }
func (m model) Update(Msg) (Model, Cmd) { return m, Quit }
func (model) View() string              { return "" }

// TestRunRefuses: a program never starts.
func TestRunRefuses(t *testing.T) {
	if _, err := NewProgram(model{}).Run(); !errors.Is(err, ErrNoInteractiveUI) {
		t.Errorf("Run: %v, want ErrNoInteractiveUI", err)
	}
	if Batch(nil, nil) != nil {
		t.Error("Batch of nils is not nil")
	}
}
