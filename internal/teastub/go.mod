// chalupa's stand-in for Bubble Tea (see README.md): go.mod's replace
// directive points github.com/charmbracelet/bubbletea here.
module github.com/charmbracelet/bubbletea

go 1.24.0
