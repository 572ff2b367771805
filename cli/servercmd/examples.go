package servercmd

// The examples in the --help of the server's most used commands (kong
// prints a command's Help() under its description).

// serveExamples head serve's detailed help, above its environment.
const serveExamples = `Examples:
  chalupa serve                                   the embedded default: ./chalupa-data, 127.0.0.1:8080
  CHALUPA_LISTEN=127.0.0.1:9090 chalupa serve     another port (the CLI finds it in serve.addr)
  chalupa serve --pause-loops reaper              start with the reaper paused
`

// Help is config cloud-init's examples.
func (*configCloudInitCmd) Help() string {
	return `Examples:
  chalupa config cloud-init --env demo-harbor --url https://chalupa.example.com > user-data.yaml
  CHALUPA_ORIGIN=https://chalupa.example.com chalupa config cloud-init --env demo-harbor --size s-2vcpu-4gb`
}
