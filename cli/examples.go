package cli

// The examples in the --help of the most used commands (kong prints a
// command's Help() under its description). Each line runs as written
// against the embedded default of a first session (README, "A first
// session"); names such as demo-harbor, dep-1 and gpu-1 are the README's.

// Help is admin status's examples.
func (*adminStatusCmd) Help() string {
	return `Examples:
  chalupa admin status                    the daemon this data dir's serve recorded
  chalupa admin status --check-tokens     and check each DigitalOcean token now
  chalupa admin status --json
  CHALUPA_URL=https://chalupa.example.com chalupa admin status   another daemon`
}

// Help is admin environment list's examples.
func (*adminEnvironmentListCmd) Help() string {
	return `Examples:
  chalupa admin environment list
  chalupa admin env list --json`
}

// Help is admin environment create's examples.
func (*adminEnvironmentCreateCmd) Help() string {
	return `Examples:
  chalupa admin environment create demo-harbor
  chalupa admin env create acme-ci --name "Acme CI" --org acme`
}

// Help is admin fleet's examples.
func (*adminFleetCmd) Help() string {
	return `Examples:
  chalupa admin fleet                     environments, deployments, deadlines, keys
  chalupa admin fleet --json`
}

// Help is admin keys's examples.
func (*adminKeysCmd) Help() string {
	return `Examples:
  chalupa admin keys issue demo-harbor --out ./agent-keys      writes ingest.key and key-id
  chalupa admin keys rotate demo-harbor --out ./agent-keys-2
  chalupa admin keys revoke "$(cat agent-keys/key-id)"`
}

// Help is admin report's examples.
func (*adminReportCmd) Help() string {
	return `Examples:
  chalupa admin report                    the last 24 hours
  chalupa admin report --since 168h       the last week
  chalupa admin report --json`
}

// Help is admin logs's examples.
func (*adminLogsCmd) Help() string {
	return `Examples:
  chalupa admin logs demo-harbor dep-1                    sessions and chunks (list)
  chalupa admin logs get demo-harbor dep-1 --follow       committed chunks, then new ones
  chalupa admin logs get demo-harbor dep-1 --out dep-1.log
  chalupa admin logs erase demo-harbor --confirm 'erase logs demo-harbor'`
}

// Help is admin converge's examples.
func (*adminConvergeCmd) Help() string {
	return `Examples:
  chalupa admin converge gpu-1 preview            what up would change
  chalupa admin converge gpu-1 up --wait          create or update, following the job
  chalupa admin converge gpu-1 destroy --wait     the droplet; the volume stays
  chalupa admin converge gpu-1 destroy --include-data --confirm 'destroy data gpu-1'`
}

// Help is mcp's examples.
func (*mcpCmd) Help() string {
	return `Examples:
  chalupa mcp                             for an assistant started in this directory
  chalupa mcp --url https://chalupa.example.com   another daemon (its token in CHALUPA_ADMIN_TOKEN)
An assistant's configuration names the command, say {"command": "chalupa", "args": ["mcp"]}.`
}
