// Package tea is chalupa's stand-in for Bubble Tea v1
// (github.com/charmbracelet/bubbletea): the types and functions the Pulumi
// SDK's console prompt compiles against, with no package init and no
// terminal I/O. See README.md.
package tea

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrNoInteractiveUI is what Program.Run returns: chalupa links no
// terminal UI.
var ErrNoInteractiveUI = errors.New("chalupa links no interactive terminal UI (Bubble Tea is stubbed)")

// Msg is a message to a Model.
type Msg interface{}

// Model is a terminal UI's state.
type Model interface {
	// Init returns the first command to run.
	Init() Cmd
	// Update handles a message, returning the new model and a command.
	Update(Msg) (Model, Cmd)
	// View renders the model.
	View() string
}

// Cmd is an I/O operation that returns a message.
type Cmd func() Msg

// BatchMsg is the message of Batch: commands to run concurrently.
type BatchMsg []Cmd

// Batch combines commands to run concurrently; nil commands are dropped,
// and none left gives nil.
func Batch(cmds ...Cmd) Cmd {
	var valid []Cmd
	for _, c := range cmds {
		if c != nil {
			valid = append(valid, c)
		}
	}
	switch len(valid) {
	case 0:
		return nil
	case 1:
		return valid[0]
	}
	return func() Msg { return BatchMsg(valid) }
}

// sequenceMsg is the message of Sequence: commands to run in order.
type sequenceMsg []Cmd

// Sequence combines commands to run one after another.
func Sequence(cmds ...Cmd) Cmd {
	return func() Msg { return sequenceMsg(cmds) }
}

// printLineMessage is the message of Println.
type printLineMessage struct{ body string }

// Println returns a command that prints args above the program's view.
func Println(args ...any) Cmd {
	return func() Msg { return printLineMessage{body: fmt.Sprint(args...)} }
}

// QuitMsg tells the program to stop.
type QuitMsg struct{}

// Quit is a command that stops the program.
func Quit() Msg { return QuitMsg{} }

// FocusMsg is sent when the terminal gains focus.
type FocusMsg struct{}

// BlurMsg is sent when the terminal loses focus.
type BlurMsg struct{}

// KeyType is a key without a printable character, or KeyRunes.
type KeyType int

// The key types Bubble Tea v1 gives these values (the control characters'
// codes; KeyRunes negative).
const (
	KeyCtrlC     KeyType = 3
	KeyEnter     KeyType = 13
	KeyEsc       KeyType = 27
	KeyBackspace KeyType = 127
	KeyRunes     KeyType = -1
)

var keyNames = map[KeyType]string{
	KeyCtrlC:     "ctrl+c",
	KeyEnter:     "enter",
	KeyEsc:       "esc",
	KeyBackspace: "backspace",
	KeyRunes:     "runes",
}

// String names the key type ("enter", "ctrl+c"…).
func (k KeyType) String() string { return keyNames[k] }

// Key is a key press.
type Key struct {
	// Type is the key; KeyRunes for printable characters.
	Type KeyType
	// Runes are the characters typed, for KeyRunes.
	Runes []rune
	// Alt reports whether alt was held.
	Alt bool
	// Paste reports whether the runes were pasted.
	Paste bool
}

// String names the key as Bubble Tea does ("alt+a", "enter"; a paste in
// brackets so that it matches no binding).
func (k Key) String() string {
	var b strings.Builder
	if k.Alt {
		b.WriteString("alt+")
	}
	if k.Type == KeyRunes {
		if k.Paste {
			b.WriteByte('[')
		}
		b.WriteString(string(k.Runes))
		if k.Paste {
			b.WriteByte(']')
		}
		return b.String()
	}
	if s, ok := keyNames[k.Type]; ok {
		b.WriteString(s)
		return b.String()
	}
	return ""
}

// KeyMsg is the message of a key press.
type KeyMsg Key

// String is Key.String.
func (k KeyMsg) String() string { return Key(k).String() }

// ProgramOption sets a Program's option.
type ProgramOption func(*Program)

// WithInput sets the program's input.
func WithInput(r io.Reader) ProgramOption { return func(p *Program) { p.input = r } }

// WithOutput sets the program's output.
func WithOutput(w io.Writer) ProgramOption { return func(p *Program) { p.output = w } }

// Program would run a Model on the terminal; here it never starts.
type Program struct {
	model  Model
	input  io.Reader
	output io.Writer
}

// NewProgram returns a program for model.
func NewProgram(model Model, opts ...ProgramOption) *Program {
	p := &Program{model: model}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Run returns the initial model and ErrNoInteractiveUI, touching neither
// input nor output.
func (p *Program) Run() (Model, error) { return p.model, ErrNoInteractiveUI }
