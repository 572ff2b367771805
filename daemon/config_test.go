package daemon_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// envFunc adapts a map to daemon.Getenv.
func envFunc(m map[string]string) daemon.Getenv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// goodEnv is a complete, valid off-loopback configuration in dataDir.
func goodEnv(dataDir string) map[string]string {
	env := proctest.NewSecrets()
	for k, v := range map[string]string{
		"CHALUPA_DATA_DIR":            dataDir,
		"CHALUPA_LISTEN":              "0.0.0.0:8443",
		"CHALUPA_ORIGIN":              "https://chalupa.example.net",
		"CHALUPA_INGEST_KEY":          "shared-ingest-" + proctest.RandomToken(24),
		"CHALUPA_REPLICA_URL":         "s3://chalupa-backups/prod?endpoint=https://nyc3.digitaloceanspaces.com",
		"CHALUPA_SPACES_KEY":          "SPACESKEY" + proctest.RandomToken(9),
		"CHALUPA_SPACES_SECRET":       "spaces-secret-" + proctest.RandomToken(24),
		"DIGITALOCEAN_READ_TOKEN":     "dop_v1_read_" + proctest.RandomToken(24),
		"DIGITALOCEAN_WRITE_TOKEN":    "dop_v1_write_" + proctest.RandomToken(24),
		"DO_VOLUME_USD_PER_GIB_MONTH": "0.10",
		"CHALUPA_DO_API_URL":          "https://api.digitalocean.com",
		"PULUMI_BACKEND_URL":          "file:///var/lib/chalupa/pulumi",
		"CHALUPA_LOGS_URL":            "s3://chalupa-backups/logs?endpoint=https://nyc3.digitaloceanspaces.com",
		"CHALUPA_LOGS_KEY":            "LOGSKEY" + proctest.RandomToken(9),
		"CHALUPA_LOGS_SECRET":         "logs-secret-" + proctest.RandomToken(24),
	} {
		env[k] = v
	}
	return env
}

// secretVars are the variables whose values must never be printed.
var secretVars = []string{
	"CHALUPA_ADMIN_TOKEN", "CHALUPA_READY_TOKEN", "CHALUPA_INGEST_MASTER_KEY", "CHALUPA_INGEST_KEY",
	"CHALUPA_SPACES_KEY", "CHALUPA_SPACES_SECRET", "DIGITALOCEAN_READ_TOKEN", "DIGITALOCEAN_WRITE_TOKEN",
	"CHALUPA_LOGS_KEY", "CHALUPA_LOGS_SECRET",
}

func TestLoadConfigAcceptsGoodEnvironmentAndRedacts(t *testing.T) {
	t.Parallel()
	env := goodEnv(t.TempDir())
	cfg, err := daemon.LoadConfig(envFunc(env))
	if err != nil {
		t.Fatalf("LoadConfig(good env): %v", err)
	}
	if len(cfg.MasterKey()) != 32 || cfg.ReplicaKind() != "s3" || cfg.Costs.VolumeUSDPerGiB != 0.10 || cfg.DigitalOcean.APIURL != "https://api.digitalocean.com/" {
		t.Fatalf("unexpected config: master key %d bytes, replica %q, volume %v, DO API %q", len(cfg.MasterKey()), cfg.ReplicaKind(), cfg.Costs.VolumeUSDPerGiB, cfg.DigitalOcean.APIURL)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	printed := fmt.Sprintf("%v\n%+v\n%#v\n%s\n%v", cfg, *cfg, *cfg, js, cfg.Redacted())
	for _, k := range secretVars {
		if strings.Contains(printed, env[k]) {
			t.Errorf("the value of %s appears when the config is printed or marshalled", k)
		}
	}
	rows := map[string]string{}
	for _, r := range cfg.Redacted() {
		rows[r[0]] = r[1]
	}
	for _, k := range secretVars {
		if rows[k] != "[redacted]" {
			t.Errorf("Redacted()[%s] = %q, want [redacted]", k, rows[k])
		}
	}
}

// TestLoadConfigRefusesBadEnvironments changes one thing of a good
// environment per case: LoadConfig must refuse it with a *ConfigError that
// names the variable and never repeats the bad value.
func TestLoadConfigRefusesBadEnvironments(t *testing.T) {
	t.Parallel()
	short := "short-secret-7Qx2" // 17 characters
	sameToken := proctest.RandomToken(32)
	sameDO := "dop_v1_same_" + proctest.RandomToken(24)
	key16 := base64.StdEncoding.EncodeToString([]byte("sixteen-byte-key"))
	key31 := base64.StdEncoding.EncodeToString([]byte("thirty-one-bytes-of-master-key!"))
	key33 := base64.StdEncoding.EncodeToString([]byte("thirty-three-bytes-of-master-key!"))

	cases := []struct {
		name string
		set  map[string]string // applied over goodEnv; "" deletes
		// setup runs before LoadConfig with the data dir.
		setup func(t *testing.T, dataDir string)
		// want is the variable the error must name; bad are values it must not contain.
		want string
		bad  []string
	}{
		{name: "http origin off loopback", set: map[string]string{"CHALUPA_ORIGIN": "http://plain-origin-4411.example.net"},
			want: "CHALUPA_ORIGIN", bad: []string{"plain-origin-4411"}},
		{name: "no origin off loopback", set: map[string]string{"CHALUPA_ORIGIN": "", "CHALUPA_LISTEN": "0.0.0.0:18444"},
			want: "CHALUPA_ORIGIN is required", bad: []string{"0.0.0.0:18444"}},
		{name: "secrets file readable by others", set: map[string]string{"CHALUPA_LISTEN": "127.0.0.1:8080", "CHALUPA_ORIGIN": "", "CHALUPA_ADMIN_TOKEN": ""},
			setup: func(t *testing.T, dataDir string) {
				writeSecretsFile(t, dataDir)
				if err := os.Chmod(filepath.Join(dataDir, daemon.SecretsFileName), 0o644); err != nil {
					t.Fatal(err)
				}
			}, want: "chmod 600"},
		{name: "origin with a path", set: map[string]string{"CHALUPA_ORIGIN": "https://chalupa.example.net/secret-path-9zz"},
			want: "CHALUPA_ORIGIN", bad: []string{"secret-path-9zz"}},
		{name: "origin not a URL", set: map[string]string{"CHALUPA_ORIGIN": "ftp://origin-host-5151"},
			want: "CHALUPA_ORIGIN", bad: []string{"origin-host-5151"}},
		{name: "all interfaces without tokens", set: map[string]string{"CHALUPA_LISTEN": "0.0.0.0:8443", "CHALUPA_ADMIN_TOKEN": "", "CHALUPA_READY_TOKEN": "", "CHALUPA_INGEST_MASTER_KEY": ""},
			want: "CHALUPA_ADMIN_TOKEN", bad: []string{"0.0.0.0:8443"}},
		{name: "empty host without ready token", set: map[string]string{"CHALUPA_LISTEN": ":18443", "CHALUPA_READY_TOKEN": ""},
			want: "CHALUPA_READY_TOKEN", bad: []string{":18443"}},
		{name: "IPv6 any without master key", set: map[string]string{"CHALUPA_LISTEN": "[::]:8443", "CHALUPA_INGEST_MASTER_KEY": ""},
			want: "CHALUPA_INGEST_MASTER_KEY"},
		{name: "off loopback ignores the generated secrets file",
			set:   map[string]string{"CHALUPA_ADMIN_TOKEN": "", "CHALUPA_READY_TOKEN": "", "CHALUPA_INGEST_MASTER_KEY": ""},
			setup: writeSecretsFile, want: "CHALUPA_ADMIN_TOKEN"},
		{name: "master key 16 bytes", set: map[string]string{"CHALUPA_INGEST_MASTER_KEY": key16},
			want: "CHALUPA_INGEST_MASTER_KEY", bad: []string{key16}},
		{name: "master key 31 bytes", set: map[string]string{"CHALUPA_INGEST_MASTER_KEY": key31},
			want: "CHALUPA_INGEST_MASTER_KEY", bad: []string{key31}},
		{name: "master key 33 bytes", set: map[string]string{"CHALUPA_INGEST_MASTER_KEY": key33},
			want: "CHALUPA_INGEST_MASTER_KEY", bad: []string{key33}},
		{name: "master key not base64", set: map[string]string{"CHALUPA_INGEST_MASTER_KEY": "not*base64*at*all*but*long*enough*to*look*like*a*key"},
			want: "CHALUPA_INGEST_MASTER_KEY", bad: []string{"not*base64"}},
		{name: "short admin token", set: map[string]string{"CHALUPA_ADMIN_TOKEN": short},
			want: "CHALUPA_ADMIN_TOKEN", bad: []string{short}},
		{name: "short ready token", set: map[string]string{"CHALUPA_READY_TOKEN": short},
			want: "CHALUPA_READY_TOKEN", bad: []string{short}},
		{name: "short shared ingest key", set: map[string]string{"CHALUPA_INGEST_KEY": short},
			want: "CHALUPA_INGEST_KEY", bad: []string{short}},
		{name: "admin token equals ready token", set: map[string]string{"CHALUPA_ADMIN_TOKEN": sameToken, "CHALUPA_READY_TOKEN": sameToken},
			want: "CHALUPA_READY_TOKEN", bad: []string{sameToken}},
		{name: "replica URL scheme", set: map[string]string{"CHALUPA_REPLICA_URL": "ftp://backup-bucket-3b7c/chalupa"},
			want: "CHALUPA_REPLICA_URL", bad: []string{"backup-bucket-3b7c"}},
		{name: "replica URL gs", set: map[string]string{"CHALUPA_REPLICA_URL": "gs://gcs-bucket-8e1d/chalupa"},
			want: "CHALUPA_REPLICA_URL", bad: []string{"gcs-bucket-8e1d"}},
		{name: "replica URL relative file", set: map[string]string{"CHALUPA_REPLICA_URL": "file://relative-dir-6f2a/replica"},
			want: "CHALUPA_REPLICA_URL", bad: []string{"relative-dir-6f2a"}},
		{name: "replica URL with credentials", set: map[string]string{"CHALUPA_REPLICA_URL": "s3://AKIAUSERINFO:pw-in-url-5c9e@bucket-x/p?endpoint=https://nyc3.digitaloceanspaces.com"},
			want: "CHALUPA_REPLICA_URL", bad: []string{"pw-in-url-5c9e", "AKIAUSERINFO"}},
		{name: "s3 replica without spaces key", set: map[string]string{"CHALUPA_SPACES_KEY": ""},
			want: "CHALUPA_SPACES_KEY", bad: []string{"chalupa-backups"}},
		{name: "s3 replica without spaces secret", set: map[string]string{"CHALUPA_SPACES_SECRET": ""},
			want: "CHALUPA_SPACES_SECRET", bad: []string{"chalupa-backups"}},
		{name: "DO read token equals write token", set: map[string]string{"DIGITALOCEAN_READ_TOKEN": sameDO, "DIGITALOCEAN_WRITE_TOKEN": sameDO},
			want: "DIGITALOCEAN_WRITE_TOKEN", bad: []string{sameDO}},
		{name: "billing cap not a number", set: map[string]string{"DO_BILLING_MONTHLY_CAP_HOURS": "four-weeks-9e9e"},
			want: "DO_BILLING_MONTHLY_CAP_HOURS", bad: []string{"four-weeks-9e9e"}},
		{name: "billing granularity zero", set: map[string]string{"DO_BILLING_GRANULARITY_SECONDS": "0"},
			want: "DO_BILLING_GRANULARITY_SECONDS"},
		{name: "billing minimum charge negative", set: map[string]string{"DO_BILLING_MINIMUM_CHARGE_USD": "-0.517"},
			want: "DO_BILLING_MINIMUM_CHARGE_USD", bad: []string{"0.517"}},
		{name: "volume rate not a number", set: map[string]string{"DO_VOLUME_USD_PER_GIB_MONTH": "ten-cents-4d4d"},
			want: "DO_VOLUME_USD_PER_GIB_MONTH", bad: []string{"ten-cents-4d4d"}},
		{name: "volume rate negative", set: map[string]string{"DO_VOLUME_USD_PER_GIB_MONTH": "-0.731"},
			want: "DO_VOLUME_USD_PER_GIB_MONTH", bad: []string{"0.731"}},
		{name: "volume rate huge", set: map[string]string{"DO_VOLUME_USD_PER_GIB_MONTH": "7919.5"},
			want: "DO_VOLUME_USD_PER_GIB_MONTH", bad: []string{"7919"}},
		{name: "volume rate infinite", set: map[string]string{"DO_VOLUME_USD_PER_GIB_MONTH": "+Inf"},
			want: "DO_VOLUME_USD_PER_GIB_MONTH"},
		{name: "volume rate NaN", set: map[string]string{"DO_VOLUME_USD_PER_GIB_MONTH": "NaN"},
			want: "DO_VOLUME_USD_PER_GIB_MONTH"},
		{name: "DO API over plain http off loopback", set: map[string]string{"CHALUPA_DO_API_URL": "http://do-proxy-6b6b.example/"},
			want: "CHALUPA_DO_API_URL must use https", bad: []string{"do-proxy-6b6b"}},
		{name: "DO API with user info", set: map[string]string{"CHALUPA_DO_API_URL": "https://u:do-pw-7c7c@api.digitalocean.com/"},
			want: "CHALUPA_DO_API_URL", bad: []string{"do-pw-7c7c"}},
		{name: "DO API with a path", set: map[string]string{"CHALUPA_DO_API_URL": "https://api.digitalocean.com/v2-path-8e8e"},
			want: "CHALUPA_DO_API_URL", bad: []string{"v2-path-8e8e"}},
		{name: "DO API not a URL", set: map[string]string{"CHALUPA_DO_API_URL": "api-host-9f9f:443"},
			want: "CHALUPA_DO_API_URL", bad: []string{"api-host-9f9f"}},
		{name: "pulumi backend gs", set: map[string]string{"PULUMI_BACKEND_URL": "gs://pulumi-state-2a2a"},
			want: "PULUMI_BACKEND_URL", bad: []string{"pulumi-state-2a2a"}},
		{name: "pulumi backend https", set: map[string]string{"PULUMI_BACKEND_URL": "https://api.pulumi-host-9d9d.example"},
			want: "PULUMI_BACKEND_URL", bad: []string{"pulumi-host-9d9d"}},
		{name: "logs key equals the replica's", set: map[string]string{"CHALUPA_SPACES_KEY": "SHAREDKEY" + sameToken, "CHALUPA_LOGS_KEY": "SHAREDKEY" + sameToken},
			want: "must never hold credentials that can delete the database replica", bad: []string{sameToken}},
		{name: "logs secret equals the replica's", set: map[string]string{"CHALUPA_SPACES_SECRET": sameToken, "CHALUPA_LOGS_SECRET": sameToken},
			want: "CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET must differ", bad: []string{sameToken}},
		{name: "logs inside the replica's path", set: map[string]string{"CHALUPA_LOGS_URL": "s3://chalupa-backups/prod/logs-7a7a"},
			want: "CHALUPA_LOGS_URL overlaps CHALUPA_REPLICA_URL", bad: []string{"logs-7a7a"}},
		{name: "logs over the whole replica bucket", set: map[string]string{"CHALUPA_LOGS_URL": "s3://chalupa-backups?region=nyc3"},
			want: "CHALUPA_LOGS_URL overlaps CHALUPA_REPLICA_URL", bad: []string{"nyc3"}},
		{name: "logs at the replica's path", set: map[string]string{"CHALUPA_LOGS_URL": "s3://chalupa-backups/prod/"},
			want: "CHALUPA_LOGS_URL overlaps"},
		{name: "logs inside a Spaces host-style replica", set: map[string]string{"CHALUPA_REPLICA_URL": "s3://chalupa-backups.nyc3.digitaloceanspaces.com/prod", "CHALUPA_LOGS_URL": "s3://chalupa-backups/prod/logs?endpoint=https://nyc3.digitaloceanspaces.com"},
			want: "CHALUPA_LOGS_URL overlaps CHALUPA_REPLICA_URL"},
		{name: "logs inside an endpoint host-style replica", set: map[string]string{"CHALUPA_REPLICA_URL": "s3://chalupa-backups.127.0.0.1:9000/prod", "CHALUPA_LOGS_URL": "s3://chalupa-backups/prod/logs-6c6c?endpoint=http://127.0.0.1:9000"},
			want: "CHALUPA_LOGS_URL overlaps CHALUPA_REPLICA_URL", bad: []string{"logs-6c6c"}},
		{name: "logs URL not s3", set: map[string]string{"CHALUPA_LOGS_URL": "https://logs-host-3e3e/x"},
			want: "CHALUPA_LOGS_URL", bad: []string{"logs-host-3e3e"}},
		{name: "logs URL with credentials", set: map[string]string{"CHALUPA_LOGS_URL": "s3://AKIALOGS:logs-pw-4f4f@logs-bucket/x"},
			want: "CHALUPA_LOGS_URL", bad: []string{"logs-pw-4f4f", "AKIALOGS"}},
		{name: "logs URL endpoint not a URL", set: map[string]string{"CHALUPA_LOGS_URL": "s3://logs-bucket/x?endpoint=ep-5a5a"},
			want: "CHALUPA_LOGS_URL", bad: []string{"ep-5a5a"}},
		{name: "logs URL without key", set: map[string]string{"CHALUPA_LOGS_KEY": ""},
			want: "CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET are required"},
		{name: "logs URL without secret", set: map[string]string{"CHALUPA_LOGS_SECRET": ""},
			want: "CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET are required"},
		{name: "logs credentials without URL", set: map[string]string{"CHALUPA_LOGS_URL": ""},
			want: "CHALUPA_LOGS_URL is not"},
		{name: "logs retention too short", set: map[string]string{"CHALUPA_LOGS_RETENTION": "59m"},
			want: "CHALUPA_LOGS_RETENTION"},
		{name: "listen without port", set: map[string]string{"CHALUPA_LISTEN": "listen-host-1e1e"},
			want: "CHALUPA_LISTEN", bad: []string{"listen-host-1e1e"}},
		{name: "listen port out of range", set: map[string]string{"CHALUPA_LISTEN": "127.0.0.1:98765"},
			want: "CHALUPA_LISTEN", bad: []string{"98765"}},
		{name: "listen port not numeric", set: map[string]string{"CHALUPA_LISTEN": "127.0.0.1:port-3c3c"},
			want: "CHALUPA_LISTEN", bad: []string{"port-3c3c"}},
		{name: "min free bytes with a unit", set: map[string]string{"CHALUPA_MIN_FREE_BYTES": "1GiB-7d7d"},
			want: "CHALUPA_MIN_FREE_BYTES", bad: []string{"7d7d"}},
		{name: "min free bytes negative", set: map[string]string{"CHALUPA_MIN_FREE_BYTES": "-1"},
			want: "CHALUPA_MIN_FREE_BYTES"},
		{name: "min free bytes beyond any disk", set: map[string]string{"CHALUPA_MIN_FREE_BYTES": "1125899906842625"},
			want: "CHALUPA_MIN_FREE_BYTES", bad: []string{"1125899906842625"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dataDir := t.TempDir()
			env := goodEnv(dataDir)
			for k, v := range tc.set {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			if tc.setup != nil {
				tc.setup(t, dataDir)
			}
			cfg, err := daemon.LoadConfig(envFunc(env))
			if err == nil {
				t.Fatalf("LoadConfig accepted the environment (config %v)", cfg.Redacted())
			}
			var ce *daemon.ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error is %T, want *daemon.ConfigError", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error does not name %s:\n%s", tc.want, msg)
			}
			for _, b := range tc.bad {
				if strings.Contains(msg, b) {
					t.Errorf("error repeats the bad value %q:\n%s", b, msg)
				}
			}
			for _, k := range secretVars {
				if v := env[k]; v != "" && strings.Contains(msg, v) {
					t.Errorf("error contains the value of %s", k)
				}
			}
		})
	}
}

// writeSecretsFile puts a valid generated-secrets file in dataDir.
func writeSecretsFile(t *testing.T, dataDir string) {
	t.Helper()
	var b strings.Builder
	for k, v := range proctest.NewSecrets() {
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	if err := os.WriteFile(filepath.Join(dataDir, daemon.SecretsFileName), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A malformed CHALUPA_LISTEN is reported as such, not as the three
// "required off loopback" secrets it cannot be judged for.
func TestLoadConfigBadListenIsOneProblem(t *testing.T) {
	_, err := daemon.LoadConfig(envFunc(map[string]string{"CHALUPA_LISTEN": "notanaddr", "CHALUPA_DATA_DIR": t.TempDir()}))
	var ce *daemon.ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || !strings.Contains(ce.Problems[0], "CHALUPA_LISTEN") {
		t.Fatalf("err = %v, want exactly one problem naming CHALUPA_LISTEN", err)
	}
}

func TestConfigCheckBinary(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)

	t.Run("bad environment", func(t *testing.T) {
		t.Parallel()
		env := goodEnv(t.TempDir())
		env["CHALUPA_ADMIN_TOKEN"] = "tiny-admin-secret-8f8f"
		env["CHALUPA_INGEST_MASTER_KEY"] = base64.StdEncoding.EncodeToString([]byte("a-key-of-only-twenty-bytes"))
		env["DIGITALOCEAN_WRITE_TOKEN"] = env["DIGITALOCEAN_READ_TOKEN"]
		env["CHALUPA_INGEST_KEY"] = "short-ingest-key-0a0a"
		for _, args := range [][]string{{"config", "check"}, {"config", "check", "--json"}} {
			out, code := proctest.RunCommand(t, bin, "", env, args...)
			if code == 0 {
				t.Fatalf("%v exited 0 for a bad environment:\n%s", args, out)
			}
			for _, k := range []string{"CHALUPA_ADMIN_TOKEN", "CHALUPA_INGEST_MASTER_KEY", "DIGITALOCEAN_WRITE_TOKEN", "CHALUPA_INGEST_KEY"} {
				if !strings.Contains(out, k) {
					t.Errorf("%v output does not name %s:\n%s", args, k, out)
				}
			}
			for _, k := range secretVars {
				if strings.Contains(out, env[k]) {
					t.Errorf("%v output contains the value of %s:\n%s", args, k, out)
				}
			}
		}
	})

	t.Run("good environment", func(t *testing.T) {
		t.Parallel()
		env := goodEnv(t.TempDir())
		out, code := proctest.RunCommand(t, bin, "", env, "config", "check")
		if code != 0 {
			t.Fatalf("config check exited %d for a good environment:\n%s", code, out)
		}
		if !strings.Contains(out, "configuration ok") {
			t.Errorf("no \"configuration ok\" line:\n%s", out)
		}
		lines := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 2 {
				lines[f[0]] = strings.Join(f[1:], " ")
			}
		}
		for _, k := range secretVars {
			if strings.Contains(out, env[k]) {
				t.Errorf("config check prints the value of %s", k)
			}
			if lines[k] != "[redacted]" {
				t.Errorf("config check shows %s as %q, want [redacted]", k, lines[k])
			}
		}
		if lines["CHALUPA_ORIGIN"] != env["CHALUPA_ORIGIN"] || lines["CHALUPA_LISTEN"] != env["CHALUPA_LISTEN"] {
			t.Errorf("non-secret values not shown as set:\n%s", out)
		}

		out, code = proctest.RunCommand(t, bin, "", env, "config", "check", "--json")
		if code != 0 {
			t.Fatalf("config check --json exited %d:\n%s", code, out)
		}
		var m map[string]string
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("config check --json is not a JSON object: %v\n%s", err, out)
		}
		for _, k := range secretVars {
			if m[k] != "[redacted]" {
				t.Errorf("config check --json shows %s as %q, want [redacted]", k, m[k])
			}
		}
	})
}

// TestEmbeddedDefault runs `chalupa serve` with nothing set in a fresh
// working directory: it must generate its secrets once into a 0600 file,
// print the file's path but none of the values, serve on loopback with them,
// and reuse the same values on the next start.
func TestEmbeddedDefault(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	dir := t.TempDir()
	opt := proctest.Options{Dir: dir, NoDefaults: true}
	// Nothing set means 127.0.0.1:8080. If something else on this machine
	// holds that port, set only CHALUPA_LISTEN (still loopback, still every
	// secret generated); the admin token check below proves which process
	// answered.
	if ln, err := net.Listen("tcp", proctest.DefaultListen); err != nil {
		t.Logf("%s is busy (%v); setting only CHALUPA_LISTEN", proctest.DefaultListen, err)
		opt.Env = map[string]string{"CHALUPA_LISTEN": proctest.FreeAddr(t)}
	} else {
		ln.Close()
	}

	d := proctest.Start(t, bin, opt)
	secretsPath := filepath.Join(d.DataDir, daemon.SecretsFileName)
	first := checkSecretsFile(t, secretsPath)
	checkLogs(t, d.Logs(), secretsPath, first)
	if fi, err := os.Stat(d.DataDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode: %v %v, want 0700", fi.Mode().Perm(), err)
	}
	ctx := context.Background()
	st, err := d.Admin().GetStatus(ctx)
	if err != nil {
		t.Fatalf("admin status with the generated token: %v", err)
	}
	if st.Replication.Kind != "file" {
		t.Errorf("replication kind %q, want file (the embedded default replicates into the data dir)", st.Replication.Kind)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(); code != 0 {
		t.Fatalf("first serve exited %d", code)
	}
	if _, err := os.Stat(filepath.Join(d.DataDir, "replica")); err != nil {
		t.Errorf("no file replica inside the data dir: %v", err)
	}

	d2 := proctest.Start(t, bin, opt)
	second := checkSecretsFile(t, secretsPath)
	for k, v := range first {
		if second[k] != v {
			t.Errorf("%s changed between starts", k)
		}
	}
	checkLogs(t, d2.Logs(), secretsPath, first)
	if _, err := d2.Admin().GetStatus(ctx); err != nil {
		t.Fatalf("second start does not accept the generated admin token: %v", err)
	}
	r, err := d2.Do(ctx, "GET", "/api/ready", proctest.Bearer(first["CHALUPA_READY_TOKEN"]), nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("second start /api/ready with the generated token: %v %+v", err, r)
	}
	d2.Signal(syscall.SIGTERM)
	if code := d2.Wait(); code != 0 {
		t.Fatalf("second serve exited %d", code)
	}
}

// checkSecretsFile asserts mode 0600 and the three generated secrets, and
// returns them.
func checkSecretsFile(t *testing.T, path string) map[string]string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("secrets file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets file mode %v, want 0600", fi.Mode().Perm())
	}
	m, err := daemon.ReadSecretsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"CHALUPA_ADMIN_TOKEN", "CHALUPA_READY_TOKEN", "CHALUPA_INGEST_MASTER_KEY"} {
		if len(m[k]) < 32 {
			t.Errorf("secrets file %s has %d characters, want a generated value", k, len(m[k]))
		}
	}
	if key, err := base64.StdEncoding.DecodeString(m["CHALUPA_INGEST_MASTER_KEY"]); err != nil || len(key) != 32 {
		t.Errorf("generated master key is not base64 of 32 bytes (%d bytes, %v)", len(key), err)
	}
	if m["CHALUPA_ADMIN_TOKEN"] == m["CHALUPA_READY_TOKEN"] {
		t.Error("generated admin and ready tokens are equal")
	}
	return m
}

// checkLogs asserts the log names the secrets file and holds no secret value.
func checkLogs(t *testing.T, logs, path string, secrets map[string]string) {
	t.Helper()
	if !strings.Contains(logs, path) {
		t.Errorf("log does not print the secrets file path %s:\n%s", path, logs)
	}
	for k, v := range secrets {
		if strings.Contains(logs, v) {
			t.Errorf("log contains the value of %s", k)
		}
	}
}

// CHALUPA_DO_API_URL defaults to the public API; plain http is accepted for
// a loopback test server only (docs/operations.md, "DigitalOcean API").
func TestLoadConfigDOAPIURL(t *testing.T) {
	t.Parallel()
	for set, want := range map[string]string{
		"":                                   "https://api.digitalocean.com/",
		"http://127.0.0.1:41234":             "http://127.0.0.1:41234/",
		"https://do-proxy.example.net:8443/": "https://do-proxy.example.net:8443/",
	} {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			env := goodEnv(t.TempDir())
			env["CHALUPA_DO_API_URL"] = set
			cfg, err := daemon.LoadConfig(envFunc(env))
			if err != nil || cfg.DigitalOcean.APIURL != want {
				t.Fatalf("CHALUPA_DO_API_URL=%q: %v, %v; want %q", set, cfg, err, want)
			}
			rows := map[string]string{}
			for _, r := range cfg.Redacted() {
				rows[r[0]] = r[1]
			}
			if rows["CHALUPA_DO_API_URL"] != want {
				t.Errorf("Redacted shows %q", rows["CHALUPA_DO_API_URL"])
			}
		})
	}
}

// TestBillingRuleFromEnvironment: DO_BILLING_* override parts of the
// droplet billing rule, and the rest keeps DigitalOcean's
// (docs/operations.md, "Cost reconciliation").
func TestBillingRuleFromEnvironment(t *testing.T) {
	t.Parallel()
	env := goodEnv(t.TempDir())
	cfg, err := daemon.LoadConfig(envFunc(env))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Costs.BillingRule != cost.DefaultRule {
		t.Fatalf("rule without DO_BILLING_*: %+v, want %+v", cfg.Costs.BillingRule, cost.DefaultRule)
	}
	env["DO_BILLING_GRANULARITY_SECONDS"] = "3600"
	env["DO_BILLING_MINIMUM_SECONDS"] = "3600"
	env["DO_BILLING_MONTHLY_CAP_HOURS"] = "730"
	if cfg, err = daemon.LoadConfig(envFunc(env)); err != nil {
		t.Fatal(err)
	}
	want := cost.Rule{Granularity: time.Hour, MinimumBilled: time.Hour, MinimumChargeUSD: cost.DefaultRule.MinimumChargeUSD, CapHours: 730}
	if cfg.Costs.BillingRule != want {
		t.Fatalf("rule = %+v, want %+v", cfg.Costs.BillingRule, want)
	}
}

// CHALUPA_MIN_FREE_BYTES: unset is the default rule, 0 turns the guard off,
// a number of bytes is taken as it is (docs/operations.md, "Quotas").
func TestLoadConfigMinFreeBytes(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        int64
	}{
		{"unset", "", storage.MinFreeAuto},
		{"off", "0", 0},
		{"bytes", "5368709120", 5 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := goodEnv(t.TempDir())
			if tc.value != "" {
				env["CHALUPA_MIN_FREE_BYTES"] = tc.value
			}
			cfg, err := daemon.LoadConfig(envFunc(env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Disk.MinFreeBytes != tc.want {
				t.Fatalf("MinFreeBytes = %d, want %d", cfg.Disk.MinFreeBytes, tc.want)
			}
		})
	}
}

// TestConfigExplicitModes: on a non-loopback listener the reaper and costs
// are either backed by their tokens or switched off by name; the
// deprecated CHALUPA_REAPER_DRY_RUN still works with a warning; on
// loopback nothing set still starts (docs/operations.md, "Configuration").
func TestConfigExplicitModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		set  map[string]string // over goodEnv; "" deletes
		// want are the strings every refusal names ("" row: accepted);
		// notWant are strings it must not say (a value the refusal
		// already named as refused is not then read as unset).
		want, notWant []string
		// mode, costs and warn check an accepted configuration.
		mode  string
		costs bool
		warn  string
	}{
		{name: "production with both tokens", mode: daemon.ReaperModeLive, costs: true},
		{name: "no write token, mode unset", set: map[string]string{"DIGITALOCEAN_WRITE_TOKEN": ""},
			want: []string{"DIGITALOCEAN_WRITE_TOKEN", "CHALUPA_REAPER=off", "chalupa config check"}},
		{name: "no write token, live", set: map[string]string{"DIGITALOCEAN_WRITE_TOKEN": "", "CHALUPA_REAPER": "live"},
			want: []string{"DIGITALOCEAN_WRITE_TOKEN", "CHALUPA_REAPER=off"}},
		{name: "no write token, dry run", set: map[string]string{"DIGITALOCEAN_WRITE_TOKEN": "", "CHALUPA_REAPER": "dry-run"},
			want: []string{"DIGITALOCEAN_WRITE_TOKEN", "CHALUPA_REAPER=off"}},
		{name: "no write token, reaper off", set: map[string]string{"DIGITALOCEAN_WRITE_TOKEN": "", "CHALUPA_REAPER": "off"},
			mode: daemon.ReaperModeOff, costs: true},
		{name: "write token, reaper off", set: map[string]string{"CHALUPA_REAPER": "off"}, mode: daemon.ReaperModeOff, costs: true},
		{name: "reaper mode unknown", set: map[string]string{"CHALUPA_REAPER": "sometimes-9f9f"}, want: []string{"CHALUPA_REAPER must be"}},
		{name: "reaper mode unknown, no write token", set: map[string]string{"CHALUPA_REAPER": "sometimes-9f9f", "DIGITALOCEAN_WRITE_TOKEN": ""},
			want: []string{"CHALUPA_REAPER must be"}, notWant: []string{"is unset", "CHALUPA_REAPER=live", "DIGITALOCEAN_WRITE_TOKEN is required"}},
		{name: "reaper mode unknown beside the deprecated dry run", set: map[string]string{"CHALUPA_REAPER": "sometimes-9f9f",
			"CHALUPA_REAPER_DRY_RUN": "true", "DIGITALOCEAN_WRITE_TOKEN": ""},
			want: []string{"CHALUPA_REAPER must be"}, notWant: []string{"CHALUPA_REAPER=dry-run", "disagree", "DIGITALOCEAN_WRITE_TOKEN is required"}},
		{name: "no read token, costs unset", set: map[string]string{"DIGITALOCEAN_READ_TOKEN": ""},
			want: []string{"DIGITALOCEAN_READ_TOKEN", "CHALUPA_COSTS=off", "chalupa config check"}},
		{name: "no read token, costs on", set: map[string]string{"DIGITALOCEAN_READ_TOKEN": "", "CHALUPA_COSTS": "on"},
			want: []string{"DIGITALOCEAN_READ_TOKEN", "CHALUPA_COSTS=off"}},
		{name: "no read token, costs off", set: map[string]string{"DIGITALOCEAN_READ_TOKEN": "", "CHALUPA_COSTS": "off"},
			mode: daemon.ReaperModeLive, costs: false},
		{name: "costs unknown", set: map[string]string{"CHALUPA_COSTS": "maybe-5e5e"}, want: []string{"CHALUPA_COSTS must be"}},
		{name: "costs unknown, no read token", set: map[string]string{"CHALUPA_COSTS": "maybe-5e5e", "DIGITALOCEAN_READ_TOKEN": ""},
			want: []string{"CHALUPA_COSTS must be"}, notWant: []string{"is unset", "DIGITALOCEAN_READ_TOKEN is required"}},
		{name: "costs on without a volume rate", set: map[string]string{"DO_VOLUME_USD_PER_GIB_MONTH": ""},
			want: []string{"DO_VOLUME_USD_PER_GIB_MONTH", "CHALUPA_COSTS=off"}},
		{name: "costs off without a volume rate", set: map[string]string{"DO_VOLUME_USD_PER_GIB_MONTH": "", "CHALUPA_COSTS": "off"},
			mode: daemon.ReaperModeLive, costs: false},
		{name: "plain-http loopback origin behind a public listener", set: map[string]string{"CHALUPA_ORIGIN": "http://127.0.0.1:8443"},
			want: []string{"CHALUPA_ORIGIN must use https"}},
		{name: "deprecated dry run alone", set: map[string]string{"CHALUPA_REAPER_DRY_RUN": "true"},
			mode: daemon.ReaperModeDryRun, costs: true, warn: "replace it with CHALUPA_REAPER=dry-run"},
		{name: "deprecated dry run false", set: map[string]string{"CHALUPA_REAPER_DRY_RUN": "false"},
			mode: daemon.ReaperModeLive, costs: true, warn: "replace it with CHALUPA_REAPER=live"},
		{name: "deprecated dry run agreeing", set: map[string]string{"CHALUPA_REAPER_DRY_RUN": "1", "CHALUPA_REAPER": "dry-run"},
			mode: daemon.ReaperModeDryRun, costs: true, warn: "CHALUPA_REAPER_DRY_RUN is deprecated"},
		{name: "deprecated dry run disagreeing", set: map[string]string{"CHALUPA_REAPER_DRY_RUN": "true", "CHALUPA_REAPER": "live"},
			want: []string{"CHALUPA_REAPER and the deprecated CHALUPA_REAPER_DRY_RUN disagree"}},
		// The embedded default: loopback with nothing set starts with the
		// reaper and costs off, as before.
		{name: "loopback, nothing set", set: map[string]string{"CHALUPA_LISTEN": "127.0.0.1:8443", "CHALUPA_ORIGIN": "",
			"DIGITALOCEAN_WRITE_TOKEN": "", "DIGITALOCEAN_READ_TOKEN": "", "DO_VOLUME_USD_PER_GIB_MONTH": ""},
			mode: daemon.ReaperModeOff, costs: false},
		{name: "loopback with tokens, no volume rate", set: map[string]string{"CHALUPA_LISTEN": "127.0.0.1:8443", "CHALUPA_ORIGIN": "",
			"DO_VOLUME_USD_PER_GIB_MONTH": ""},
			mode: daemon.ReaperModeLive, costs: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := goodEnv(t.TempDir())
			for k, v := range tc.set {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			cfg, err := daemon.LoadConfig(envFunc(env))
			if len(tc.want) > 0 {
				if err == nil {
					t.Fatalf("accepted (reaper %s, costs %v), want a refusal naming %q", cfg.Reaper.Mode, cfg.Costs.On, tc.want)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal does not say %q:\n%v", w, err)
					}
				}
				for _, w := range tc.notWant {
					if strings.Contains(err.Error(), w) {
						t.Errorf("refusal says %q, untrue of this configuration:\n%v", w, err)
					}
				}
				for _, v := range []string{"sometimes-9f9f", "maybe-5e5e", "127.0.0.1:8443"} {
					if strings.Contains(err.Error(), v) {
						t.Errorf("refusal repeats the value %q", v)
					}
				}
				for _, k := range secretVars {
					if v := env[k]; v != "" && strings.Contains(err.Error(), v) {
						t.Errorf("refusal contains the value of %s", k)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if cfg.Reaper.Mode != tc.mode || cfg.Reaper.DryRun != (tc.mode == daemon.ReaperModeDryRun) || cfg.Costs.On != tc.costs {
				t.Errorf("reaper %q (dry run %v), costs %v; want %q, %v", cfg.Reaper.Mode, cfg.Reaper.DryRun, cfg.Costs.On, tc.mode, tc.costs)
			}
			warnings := strings.Join(cfg.Warnings, "\n")
			if (tc.warn == "") != (warnings == "") || !strings.Contains(warnings, tc.warn) {
				t.Errorf("warnings %q, want %q", warnings, tc.warn)
			}
			notes := strings.Join(cfg.ModeNotes(), "\n")
			if got := strings.Contains(notes, "the reaper is off"); got != (tc.mode == daemon.ReaperModeOff) {
				t.Errorf("mode notes %q for reaper %s", notes, tc.mode)
			}
			if got := strings.Contains(notes, "costs are off"); got != !tc.costs {
				t.Errorf("mode notes %q for costs %v", notes, tc.costs)
			}
		})
	}
}

// TestConfigWarnsWhereBoxAgentsCannotWork: with converge on, a loopback
// CHALUPA_ORIGIN (the agent URL converge writes into each box) and one
// digest in both architectures' variables are warnings that name the
// variables (docs/operations.md, "Configuration"); serve still starts.
func TestConfigWarnsWhereBoxAgentsCannotWork(t *testing.T) {
	const (
		digestA = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
		digestB = "486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"
	)
	converge := map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": "dop_v1_provision_" + proctest.RandomToken(24), "CHALUPA_PULUMI_CLI": "/bin/true"}
	for _, tc := range []struct {
		name  string
		set   map[string]string
		warn  string
		quiet string
	}{
		{name: "converge with a loopback origin", set: map[string]string{"CHALUPA_LISTEN": "127.0.0.1:8443", "CHALUPA_ORIGIN": "http://127.0.0.1:8443"},
			warn: "CHALUPA_ORIGIN is a loopback address"},
		{name: "converge with the public origin", quiet: "CHALUPA_ORIGIN is a loopback"},
		{name: "loopback origin without converge", set: map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": "", "CHALUPA_LISTEN": "127.0.0.1:8443", "CHALUPA_ORIGIN": ""},
			quiet: "CHALUPA_ORIGIN is a loopback"},
		{name: "one digest for both architectures", set: map[string]string{"CHALUPA_AGENT_SHA256_AMD64": digestA, "CHALUPA_AGENT_SHA256_ARM64": digestA},
			warn: "CHALUPA_AGENT_SHA256_AMD64 and CHALUPA_AGENT_SHA256_ARM64 hold the same digest"},
		{name: "a digest per architecture", set: map[string]string{"CHALUPA_AGENT_SHA256_AMD64": digestA, "CHALUPA_AGENT_SHA256_ARM64": digestB},
			quiet: "hold the same digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := goodEnv(t.TempDir())
			env["CHALUPA_AGENT_VERSION"], env["CHALUPA_AGENT_RELEASE_URL"] = "v1.2.3", "https://releases.example.net/chalupa/v1.2.3"
			for k, v := range converge {
				env[k] = v
			}
			for k, v := range tc.set {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			cfg, err := daemon.LoadConfig(envFunc(env))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			warnings := strings.Join(cfg.Warnings, "\n")
			if tc.warn != "" && !strings.Contains(warnings, tc.warn) {
				t.Errorf("warnings %q lack %q", warnings, tc.warn)
			}
			if tc.quiet != "" && strings.Contains(warnings, tc.quiet) {
				t.Errorf("warnings %q say %q", warnings, tc.quiet)
			}
			for _, v := range []string{digestA, "127.0.0.1:8443"} {
				if strings.Contains(warnings, v) {
					t.Errorf("warnings repeat the value %q", v)
				}
			}
		})
	}
}
