package pulumiexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Project is the Pulumi project name of every box stack.
const Project = "chalupa"

// CLIVersion is the pulumi CLI version the engine drives; the Automation
// API refuses a CLI that reports none (contrib/install-test-tools.sh stamps
// it).
const CLIVersion = "3.274.1"

// DefaultNice is the CPU niceness of Pulumi's child processes: the CLI and
// the provider plugins it starts run behind the daemon, so signed ingest
// keeps its latency on one vCPU while an `up` runs (docs/operations.md,
// "Converge").
const DefaultNice = 10

// Action is one of the four converge verbs (docs/operations.md,
// "Converge").
type Action string

// The actions.
const (
	ActionPreview Action = "preview"
	ActionUp      Action = "up"
	ActionRefresh Action = "refresh"
	ActionDestroy Action = "destroy"
)

// ParseAction reads an action; "" and anything else is ErrUnknownAction
// (the action is required, with no default).
func ParseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case ActionPreview, ActionUp, ActionRefresh, ActionDestroy:
		return a, nil
	}
	return "", ErrUnknownAction
}

// DataConfirmPhrase is the phrase destroying a box's data stack needs:
// "destroy data <box>".
func DataConfirmPhrase(box string) string { return "destroy data " + box }

// Errors of Engine.Run.
var (
	// ErrUnknownAction: the action is not preview, up, refresh or destroy.
	ErrUnknownAction = errors.New("converge: action must be preview, up, refresh or destroy")
	// ErrNoProvisionToken: DIGITALOCEAN_PROVISION_TOKEN is not set.
	ErrNoProvisionToken = errors.New("converge: DIGITALOCEAN_PROVISION_TOKEN is not set")
	// ErrConfirmData: destroying the data stack without the confirmation
	// phrase (DataConfirmPhrase).
	ErrConfirmData = errors.New("converge: destroying a box's data needs includeData and the phrase \"destroy data <box>\"")
	// ErrBusy: the stack's lock is held by another update.
	ErrBusy = errors.New("converge: another update in progress")
)

// Engine runs box programs through the pulumi CLI. The zero value is not
// usable: WorkDir, PulumiHome and CLIPath are required.
type Engine struct {
	// WorkDir holds one Pulumi workspace directory per stack.
	WorkDir string
	// BackendURL is the state backend; "" is file://WorkDir/state.
	BackendURL string
	// PulumiHome is PULUMI_HOME for the CLI: its plugins (the DigitalOcean
	// provider) live there.
	PulumiHome string
	// CLIPath is the pulumi binary.
	CLIPath string
	// ProvisionToken is DIGITALOCEAN_PROVISION_TOKEN, handed only to
	// Pulumi's child processes as the provider's DIGITALOCEAN_TOKEN —
	// never in stack configuration, state or logs.
	ProvisionToken string
	// APIURL is the DigitalOcean API base URL for the provider
	// (DIGITALOCEAN_API_URL); "" is the public API.
	APIURL string
	// Nice is the niceness of Pulumi's child processes; 0 is DefaultNice,
	// negative disables it.
	Nice int
	// ExtraEnv is added to the child processes' environment (e.g. the AWS
	// variables of an s3:// backend).
	ExtraEnv map[string]string
}

// RunOptions refine a run.
type RunOptions struct {
	// IncludeData extends destroy to the data stack; Confirm must then be
	// DataConfirmPhrase(box).
	IncludeData bool
	Confirm     string
}

// Steps counts a run's resource steps over both stacks, the Pulumi stack
// pseudo-resources and providers excluded.
type Steps struct {
	Create, Update, Delete, Same, Import, Replace int
}

// Result is what a run did and, after up or refresh, what exists.
type Result struct {
	// Steps are the resource steps (planned, for preview).
	Steps Steps
	// DropletID, IPv4, FirewallID and VolumeID are the stacks' outputs
	// after the run ("" when the stack has none).
	DropletID, IPv4, FirewallID, VolumeID string
	// Gone are the provider ids a destroy's stacks recorded that the
	// provider no longer had (its refresh before the destroy found them
	// missing: a droplet the reaper destroyed, or one deleted outside
	// chalupa). They count as deleted; "" where nothing was missing.
	Gone StateIDs
	// Elapsed is the run's wall time.
	Elapsed time.Duration
}

// Event is one progress report: a resource step starting or a stack done.
type Event struct {
	// Stack is the stack name.
	Stack string
	// Op is the step ("create", "same", …) or "done" when the stack's run
	// ended.
	Op string
	// Type and Name identify the resource.
	Type, Name string
}

func (e *Engine) backend() string {
	if e.BackendURL != "" {
		return e.BackendURL
	}
	return "file://" + filepath.Join(e.WorkDir, "state")
}

// env is the child processes' whole environment: nothing of the daemon's
// own (its other tokens stay out), only what Pulumi and the provider need.
func (e *Engine) env() map[string]string {
	env := map[string]string{
		"PULUMI_BACKEND_URL":       e.backend(),
		"PULUMI_CONFIG_PASSPHRASE": "",
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"PULUMI_HOME":              e.PulumiHome,
		"DIGITALOCEAN_TOKEN":       e.ProvisionToken,
	}
	if e.APIURL != "" {
		env["DIGITALOCEAN_API_URL"] = strings.TrimSuffix(e.APIURL, "/")
	}
	for k, v := range e.ExtraEnv {
		env[k] = v
	}
	return env
}

// Run applies action to the box's stacks. Up and preview run the data
// stack, then compute; destroy runs compute only, and data too when
// opts.IncludeData (with the phrase); refresh runs both. A stack without
// state whose resources the spec knows imports them (adoption), so up
// creates nothing when reality matches intent. progress, when not nil,
// receives events as they happen.
//
// Errors: ErrInvalidSpec, ErrNoProvisionToken, ErrConfirmData, ErrBusy,
// or the CLI's failure.
func (e *Engine) Run(ctx context.Context, spec BoxSpec, action Action, opts RunOptions, progress func(Event)) (Result, error) {
	start := time.Now()
	if _, err := ParseAction(string(action)); err != nil {
		return Result{}, err
	}
	if err := spec.Validate(); err != nil {
		return Result{}, err
	}
	if e.ProvisionToken == "" {
		return Result{}, ErrNoProvisionToken
	}
	if action == ActionDestroy && opts.IncludeData && opts.Confirm != DataConfirmPhrase(spec.Name) {
		return Result{}, ErrConfirmData
	}
	if progress == nil {
		progress = func(Event) {}
	}
	var res Result
	data, err := e.stack(ctx, spec.DataStack(), nil)
	if err != nil {
		return res, err
	}
	run := func(st stackRun, fn pulumi.RunFunc) error {
		s, err := e.stack(ctx, st.name, fn)
		if err != nil {
			return err
		}
		steps, gone, err := e.apply(ctx, s, st, action, progress)
		res.Steps = res.Steps.add(steps)
		res.Gone = res.Gone.merge(gone)
		return err
	}
	// Data first (compute attaches its volume), except on destroy.
	if action != ActionDestroy {
		adopt, err := e.empty(ctx, data)
		if err != nil {
			return res, err
		}
		if err := run(stackRun{name: spec.DataStack()}, dataProgram(spec, adopt, true)); err != nil {
			return res, err
		}
	}
	volumeID := spec.Known.VolumeID
	if spec.VolumeGiB == 0 {
		volumeID = "" // a box without a data volume attaches none
	} else if out, err := data.Outputs(ctx); err == nil {
		if v, ok := out[OutVolumeID].Value.(string); ok && v != "" {
			volumeID = v
		}
	}
	compute, err := e.stack(ctx, spec.ComputeStack(), nil)
	if err != nil {
		return res, err
	}
	adopt, err := e.empty(ctx, compute)
	if err != nil {
		return res, err
	}
	if err := run(stackRun{name: spec.ComputeStack()}, computeProgram(spec, volumeID, adopt)); err != nil {
		return res, err
	}
	if action == ActionDestroy && opts.IncludeData {
		// Unprotect first (an up of the program with protect off), then
		// destroy.
		if err := run(stackRun{name: spec.DataStack(), unprotect: true}, dataProgram(spec, false, false)); err != nil {
			return res, err
		}
	}
	if err := e.outputs(ctx, spec, &res); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

type stackRun struct {
	name      string
	unprotect bool
}

// stack opens (creating if needed) a stack's workspace with fn as its
// program (nil for reading only).
func (e *Engine) stack(ctx context.Context, name string, fn pulumi.RunFunc) (auto.Stack, error) {
	if fn == nil {
		fn = func(*pulumi.Context) error { return nil }
	}
	dir, err := e.workspaceDir(name)
	if err != nil {
		return auto.Stack{}, err
	}
	cmd := e.cmd()
	return auto.UpsertStackInlineSource(ctx, name, Project, fn,
		auto.WorkDir(dir), auto.PulumiHome(e.PulumiHome), auto.Pulumi(cmd), auto.EnvVars(e.env()))
}

// ExportStack returns stack name's state as Pulumi exports it (the JSON of
// an apitype.UntypedDeployment) and whether the stack exists in the backend;
// a missing stack is (nil, false, nil) and is not created. Checkpoints
// save this (docs/operations.md, "Checkpoints"). Errors: the CLI's failure.
func (e *Engine) ExportStack(ctx context.Context, name string) ([]byte, bool, error) {
	s, err := e.selectStack(ctx, name)
	if auto.IsSelectStack404Error(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, e.cliError(err)
	}
	dep, err := s.Export(ctx)
	if err != nil {
		return nil, true, e.cliError(err)
	}
	b, err := json.Marshal(dep)
	if err != nil {
		return nil, true, err
	}
	return b, true, nil
}

// ImportStack replaces stack name's state with export (ExportStack's
// bytes), creating the stack if needed. Errors: a malformed export; the
// CLI's failure.
func (e *Engine) ImportStack(ctx context.Context, name string, export []byte) error {
	var dep apitype.UntypedDeployment
	if err := json.Unmarshal(export, &dep); err != nil {
		return fmt.Errorf("converge: the stack export is malformed: %w", err)
	}
	s, err := e.stack(ctx, name, nil)
	if err != nil {
		return e.cliError(err)
	}
	if err := s.Import(ctx, dep); err != nil {
		return e.cliError(err)
	}
	return nil
}

// selectStack opens an existing stack for reading; a missing one is an
// auto.IsSelectStack404Error.
func (e *Engine) selectStack(ctx context.Context, name string) (auto.Stack, error) {
	dir, err := e.workspaceDir(name)
	if err != nil {
		return auto.Stack{}, err
	}
	cmd := e.cmd()
	return auto.SelectStackInlineSource(ctx, name, Project, func(*pulumi.Context) error { return nil },
		auto.WorkDir(dir), auto.PulumiHome(e.PulumiHome), auto.Pulumi(cmd), auto.EnvVars(e.env()))
}

// workspaceDir creates stack name's workspace directory and a file
// backend's directory, and returns the workspace directory.
func (e *Engine) workspaceDir(name string) (string, error) {
	dir := filepath.Join(e.WorkDir, "workspaces", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if strings.HasPrefix(e.backend(), "file://") {
		if err := os.MkdirAll(strings.TrimPrefix(e.backend(), "file://"), 0o700); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// nice is the child processes' niceness (see Nice).
func (e *Engine) nice() int {
	if e.Nice == 0 {
		return DefaultNice
	}
	return e.Nice
}

// empty reports whether a stack holds no resources (a new stack, or its
// state wiped): the case in which known ids are imported.
func (e *Engine) empty(ctx context.Context, s auto.Stack) (bool, error) {
	dep, err := s.Export(ctx)
	if err != nil {
		return false, e.cliError(err)
	}
	var d struct {
		Resources []json.RawMessage `json:"resources"`
	}
	if len(dep.Deployment) == 0 {
		return true, nil
	}
	if err := json.Unmarshal(dep.Deployment, &d); err != nil {
		return false, err
	}
	return len(d.Resources) == 0, nil
}

// apply runs one action on one stack, counting its steps from the engine
// events. The Automation API does not close the event channel when the CLI
// fails early, so the consumer never blocks the producer and Run never
// waits for the channel after an error.
//
// A destroy refreshes the stack first and answers what the refresh found
// gone: a resource the provider no longer has leaves the state there and
// counts as deleted, so the destroy never asks the provider to delete it
// (the DigitalOcean provider's delete reads the droplet first, and whether
// a 404 there fails depends on its version; docs/operations.md,
// "Converge").
func (e *Engine) apply(ctx context.Context, s auto.Stack, st stackRun, action Action, progress func(Event)) (Steps, StateIDs, error) {
	var gone StateIDs
	if action == ActionDestroy {
		left, g, err := e.refreshGone(ctx, s)
		if err != nil {
			return Steps{}, g, err
		}
		gone = g
		if left == (StateIDs{}) {
			// Nothing left to destroy; in particular the unprotecting up
			// must not recreate a volume that is gone.
			progress(Event{Stack: s.Name(), Op: "done"})
			return Steps{}, gone, nil
		}
	}
	ch := make(chan events.EngineEvent)
	var mu sync.Mutex
	var steps Steps
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for ev := range ch {
			pre := ev.ResourcePreEvent
			if pre == nil || pre.Metadata.Type == "pulumi:pulumi:Stack" || strings.HasPrefix(pre.Metadata.Type, "pulumi:providers:") {
				continue
			}
			mu.Lock()
			steps.count(pre.Metadata.Op)
			mu.Unlock()
			progress(Event{Stack: s.Name(), Op: string(pre.Metadata.Op), Type: pre.Metadata.Type, Name: urnName(pre.Metadata.URN)})
		}
	}()
	var err error
	act := action
	if st.unprotect {
		act = ActionUp
	}
	switch act {
	case ActionPreview:
		_, err = s.Preview(ctx, optpreview.EventStreams(ch))
	case ActionUp:
		_, err = s.Up(ctx, optup.EventStreams(ch))
	case ActionRefresh:
		var r auto.RefreshResult
		r, err = s.Refresh(ctx, optrefresh.EventStreams(ch))
		if err == nil {
			<-drained
			progress(Event{Stack: s.Name(), Op: "done"})
			return refreshSteps(r.Summary.ResourceChanges), gone, nil
		}
	case ActionDestroy:
		_, err = s.Destroy(ctx, optdestroy.EventStreams(ch))
	}
	if err == nil && st.unprotect {
		ch = make(chan events.EngineEvent)
		go func() {
			for range ch {
			}
		}()
		_, err = s.Destroy(ctx, optdestroy.EventStreams(ch))
	}
	if err != nil {
		return Steps{}, gone, e.cliError(err)
	}
	<-drained
	progress(Event{Stack: s.Name(), Op: "done"})
	mu.Lock()
	defer mu.Unlock()
	return steps, gone, nil
}

// refreshGone refreshes a stack's state from the provider and answers the
// ids it records afterwards (left) and those it recorded before and no
// longer does (gone: what the provider answered missing). A stack that
// records nothing is not refreshed. Errors: the CLI's failure; a state
// that is not a deployment.
func (e *Engine) refreshGone(ctx context.Context, s auto.Stack) (left, gone StateIDs, err error) {
	before, err := e.stateIDs(ctx, s)
	if err != nil || before == (StateIDs{}) {
		return before, gone, err
	}
	if _, err := s.Refresh(ctx); err != nil {
		return before, gone, e.cliError(err)
	}
	left, err = e.stateIDs(ctx, s)
	if err != nil {
		return before, gone, err
	}
	if before.DropletID != "" && left.DropletID == "" {
		gone.DropletID = before.DropletID
	}
	if before.FirewallID != "" && left.FirewallID == "" {
		gone.FirewallID = before.FirewallID
	}
	if before.VolumeID != "" && left.VolumeID == "" {
		gone.VolumeID = before.VolumeID
	}
	return left, gone, nil
}

// stateIDs reads the provider ids a stack's state records. Errors: the
// CLI's failure; a state that is not a deployment.
func (e *Engine) stateIDs(ctx context.Context, s auto.Stack) (StateIDs, error) {
	exp, err := s.Export(ctx)
	if err != nil {
		return StateIDs{}, e.cliError(err)
	}
	ids, _, _, err := dropPending(exp.Deployment)
	if err != nil {
		return StateIDs{}, fmt.Errorf("converge: stack %s state: %w", s.Name(), err)
	}
	return ids, nil
}

func (e *Engine) cliError(err error) error {
	if auto.IsConcurrentUpdateError(err) {
		return fmt.Errorf("%w: %v", ErrBusy, err)
	}
	return redact(err, e.ProvisionToken)
}

// redact removes the token from an error's text (the CLI's stderr is part
// of its errors).
func redact(err error, token string) error {
	if token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), token, "[redacted]"))
}

// outputs fills the result's provider ids from the stacks' state, not
// their outputs: a refresh does not run the program, so outputs keep what
// the last up saw, while the state shows what the refresh found (a droplet
// deleted behind chalupa's back is no longer in it).
func (e *Engine) outputs(ctx context.Context, spec BoxSpec, res *Result) error {
	for _, name := range []string{spec.ComputeStack(), spec.DataStack()} {
		s, err := e.stack(ctx, name, nil)
		if err != nil {
			return err
		}
		exp, err := s.Export(ctx)
		if err != nil {
			return e.cliError(err)
		}
		var state struct {
			Resources []struct {
				Type    string         `json:"type"`
				ID      string         `json:"id"`
				Outputs map[string]any `json:"outputs"`
			} `json:"resources"`
		}
		if len(exp.Deployment) > 0 {
			if err := json.Unmarshal(exp.Deployment, &state); err != nil {
				return fmt.Errorf("converge: read stack %s state: %w", name, err)
			}
		}
		for _, r := range state.Resources {
			switch r.Type {
			case typeDroplet:
				res.DropletID = r.ID
				res.IPv4, _ = r.Outputs["ipv4Address"].(string)
			case typeFirewall:
				res.FirewallID = r.ID
			case typeVolume:
				res.VolumeID = r.ID
			}
		}
	}
	return nil
}

// refreshSteps turns a refresh's summary into step counts: a refresh's
// engine events all carry the op "refresh", while its summary says what it
// found (same, update for drift, delete for a resource gone). The stack
// resource itself is not counted.
func refreshSteps(changes *map[string]int) Steps {
	var steps Steps
	if changes == nil {
		return steps
	}
	for op, n := range *changes {
		for range n {
			steps.count(apitype.OpType(op))
		}
	}
	if steps.Same > 0 {
		steps.Same-- // the pulumi:pulumi:Stack resource
	}
	return steps
}

func (s *Steps) count(op apitype.OpType) {
	switch op {
	case apitype.OpCreate:
		s.Create++
	case apitype.OpUpdate:
		s.Update++
	case apitype.OpDelete:
		s.Delete++
	case apitype.OpSame:
		s.Same++
	case apitype.OpImport:
		s.Import++
	case apitype.OpReplace:
		s.Replace++
	}
}

func (s Steps) add(o Steps) Steps {
	return Steps{s.Create + o.Create, s.Update + o.Update, s.Delete + o.Delete, s.Same + o.Same, s.Import + o.Import, s.Replace + o.Replace}
}

// String is "create=N update=N delete=N same=N import=N replace=N".
func (s Steps) String() string {
	return fmt.Sprintf("create=%d update=%d delete=%d same=%d import=%d replace=%d", s.Create, s.Update, s.Delete, s.Same, s.Import, s.Replace)
}

func urnName(urn string) string {
	if i := strings.LastIndex(urn, "::"); i >= 0 {
		return urn[i+2:]
	}
	return urn
}

// command runs the pulumi CLI below the daemon's CPU priority, with only
// the environment the engine gives it.
type command struct {
	path string
	nice int
	env  map[string]string
}

func (c *command) Version() semver.Version { return semver.MustParse(CLIVersion) }

func (c *command) Run(ctx context.Context, workdir string, stdin io.Reader, out, errOut []io.Writer,
	additionalEnv []string, args ...string,
) (string, string, int, error) {
	args = append(slices.Clone(args), "--non-interactive")
	name, argv := c.path, args
	if c.nice > 0 {
		nice, err := exec.LookPath("nice")
		if err != nil {
			return "", "", -2, fmt.Errorf("converge: nice (coreutils) is needed to lower Pulumi's CPU priority: %w", err)
		}
		name, argv = nice, append([]string{"-n", strconv.Itoa(c.nice), c.path}, args...)
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Dir = workdir
	env := []string{"PATH=" + filepath.Dir(c.path) + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"TMPDIR=" + os.TempDir(), "PULUMI_AUTOMATION_API=true"}
	keys := make([]string, 0, len(c.env))
	for k := range c.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+c.env[k])
	}
	cmd.Env = append(env, additionalEnv...)
	var stdout, stderr strings.Builder
	cmd.Stdout = io.MultiWriter(append(out, &stdout)...)
	cmd.Stderr = io.MultiWriter(append(errOut, &stderr)...)
	cmd.Stdin = stdin
	cmd.SysProcAttr = childProcAttr()
	// Cancellation interrupts the CLI, which stops its providers and
	// writes its state, as Ctrl-C does; it is killed if it has not exited
	// 10 s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	code := -2
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err == nil {
		code = 0
	}
	return stdout.String(), stderr.String(), code, err
}
