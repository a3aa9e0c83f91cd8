package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"skiff.dev/services/internal/pki"
)

const etcdUsage = `usage:
  skiff etcd snapshot save FILE [--endpoints https://127.0.0.1:2379] [--pki-dir DIR]
                                [--etcd-cafile FILE] [--etcd-certfile FILE] [--etcd-keyfile FILE] [--dial-timeout 5s]
  skiff etcd snapshot restore FILE --data-dir DIR [--name skiff] [--initial-advertise-peer-urls https://127.0.0.1:2380]
                                [--initial-cluster NAME=URL,...] [--initial-cluster-token etcd-cluster]
                                [--skip-hash-check] [--bump-revision N --mark-compacted]
  skiff etcd snapshot status FILE`

// Defaults of skiff etcd snapshot: the all-in-one's embedded etcd (embedetcd's member
// name, its client port on loopback) and the peer URL a restored member advertises
// until it is started (the all-in-one picks its own peer port at every start).
const (
	defaultEtcdEndpoint     = "https://127.0.0.1:2379"
	defaultEtcdMemberName   = "skiff"
	defaultEtcdPeerURL      = "https://127.0.0.1:2380"
	defaultEtcdClusterToken = "etcd-cluster" // etcd's --initial-cluster-token default
)

// etcdMain runs `skiff etcd snapshot save|restore|status`, etcdctl's and etcdutl's
// snapshot commands over etcd's snapshot API: save streams a member's point-in-time
// backend database to FILE (go.etcd.io/etcd/client/v3/snapshot.SaveWithVersion, with
// the apiserver's etcd client certificate); restore writes a new single-member data
// directory from FILE (go.etcd.io/etcd/etcdutl/v3/snapshot, as `etcdutl snapshot
// restore`); status prints FILE's hash, revision, keys and size. It returns the exit
// code: 0, 1 on failure, 2 on a usage error.
func etcdMain(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "snapshot" {
		fmt.Fprintln(stderr, etcdUsage)
		return 2
	}
	verb := args[1]
	fs := flag.NewFlagSet("skiff etcd snapshot "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var run func(ctx context.Context, file string) error
	switch verb {
	case "save":
		dataDir := cmp.Or(os.Getenv("SKIFF_DATA_DIR"), "./skiff-data")
		endpoints := fs.String("endpoints", defaultEtcdEndpoint, "the etcd member to snapshot (one client URL); https is dialed with mutual TLS")
		pkiDir := fs.String("pki-dir", filepath.Join(dataDir, "pki"), "`skiff pki init` directory the TLS files default from (default: $SKIFF_DATA_DIR/pki, else ./skiff-data/pki: the all-in-one's)")
		caFile := fs.String("etcd-cafile", "", "CA verifying etcd's serving certificate (default: <pki-dir>/etcd/ca.crt, the etcd CA)")
		certFile := fs.String("etcd-certfile", "", "client certificate toward etcd (default: <pki-dir>/apiserver-etcd-client.crt)")
		keyFile := fs.String("etcd-keyfile", "", "client key toward etcd (default: <pki-dir>/apiserver-etcd-client.key)")
		dialTimeout := fs.Duration("dial-timeout", 5*time.Second, "how long to wait for a connection to etcd")
		run = func(ctx context.Context, file string) error {
			return saveSnapshot(ctx, stdout, file, *endpoints, *pkiDir, *caFile, *certFile, *keyFile, *dialTimeout)
		}
	case "restore":
		cfg := snapshot.RestoreConfig{}
		fs.StringVar(&cfg.OutputDataDir, "data-dir", "", "the new member's data directory, which must not exist or be empty (the all-in-one's: <its --data-dir>/etcd); required")
		fs.StringVar(&cfg.Name, "name", defaultEtcdMemberName, "the member's name (the all-in-one's embedded etcd is skiff; compose's is etcd)")
		peerURLs := fs.String("initial-advertise-peer-urls", defaultEtcdPeerURL, "the member's peer URLs, comma-separated")
		fs.StringVar(&cfg.InitialCluster, "initial-cluster", "", "the restored cluster's members, NAME=URL,... (default: --name=--initial-advertise-peer-urls, one member)")
		fs.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", defaultEtcdClusterToken, "the restored cluster's token")
		fs.BoolVar(&cfg.SkipHashCheck, "skip-hash-check", false, "accept a FILE without its integrity hash (a db file copied from a data directory)")
		fs.Uint64Var(&cfg.RevisionBump, "bump-revision", 0, "raise the latest revision by this much, so that no client sees a revision go backwards; needs --mark-compacted")
		fs.BoolVar(&cfg.MarkCompacted, "mark-compacted", false, "mark the latest revision compacted, so watches from before the snapshot get 410 Gone and relist; needs --bump-revision")
		run = func(_ context.Context, file string) error {
			cfg.SnapshotPath = file
			cfg.PeerURLs = strings.Split(*peerURLs, ",")
			if cfg.InitialCluster == "" {
				var members []string
				for _, u := range cfg.PeerURLs {
					members = append(members, cfg.Name+"="+u)
				}
				cfg.InitialCluster = strings.Join(members, ",")
			}
			return restoreSnapshot(stdout, cfg)
		}
	case "status":
		run = func(_ context.Context, file string) error { return snapshotStatus(stdout, file) }
	default:
		fmt.Fprintln(stderr, etcdUsage)
		return 2
	}
	positional, err := parseInterspersed(fs, args[2:])
	if err != nil {
		return 2
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "skiff etcd snapshot %s: want one FILE, got %d arguments\n%s\n", verb, len(positional), etcdUsage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, positional[0]); err != nil {
		fmt.Fprintf(stderr, "skiff etcd snapshot %s: %v\n", verb, err)
		var usage usageError
		if errors.As(err, &usage) {
			return 2
		}
		return 1
	}
	return 0
}

// parseInterspersed parses args into fs, flags before and after the positional
// arguments alike (`restore FILE --data-dir DIR`), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// saveSnapshot streams the snapshot of the one etcd member at endpoint into file (which
// is replaced, as etcdctl does: written to file.part, then renamed) and prints its
// status. An https endpoint is dialed with the TLS files given, each defaulting to
// pkiDir's (the apiserver's etcd client pair and the etcd CA).
func saveSnapshot(ctx context.Context, stdout io.Writer, file, endpoint, pkiDir, caFile, certFile, keyFile string, dialTimeout time.Duration) error {
	if strings.Contains(endpoint, ",") {
		return usageError(fmt.Sprintf("--endpoints %q: a snapshot is taken of one member; name one client URL", endpoint))
	}
	var tlsConfig *tls.Config
	if strings.HasPrefix(endpoint, "https://") {
		var err error
		if tlsConfig, err = pki.ClientTLSFromFiles(pkiDir, pki.APIServerEtcdClient.Name, pki.EtcdCA, caFile, certFile, keyFile); err != nil {
			return fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: dialTimeout, TLS: tlsConfig, Logger: zap.NewNop()}
	// The snapshot stream waits for a connection as long as ctx lasts: ask the member's
	// status first, within the dial timeout, so an unreachable or refusing etcd is
	// reported rather than waited for.
	if err := memberAnswers(ctx, cfg); err != nil {
		return fmt.Errorf("snapshot of %s: %w", endpoint, err)
	}
	version, err := clientsnapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, file)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", endpoint, err)
	}
	status, err := snapshot.NewV3(zap.NewNop()).Status(file)
	if err != nil {
		return fmt.Errorf("read back %s: %w", file, err)
	}
	if version != "" {
		version = " (etcd storage version " + version + ")"
	}
	fmt.Fprintf(stdout, "Snapshot saved at %s: revision %d, %d keys, %d bytes%s\n",
		file, status.Revision, status.TotalKey, status.TotalSize, version)
	return nil
}

// memberAnswers asks the member of cfg for its status within cfg.DialTimeout.
func memberAnswers(ctx context.Context, cfg clientv3.Config) error {
	client, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := client.Status(ctx, cfg.Endpoints[0]); err != nil {
		return fmt.Errorf("no answer within %v: %w", cfg.DialTimeout, err)
	}
	return nil
}

// restoreSnapshot writes a new member data directory from cfg.SnapshotPath. Errors: a
// missing snapshot, a data directory that exists and is not empty, bad URLs, a
// --bump-revision without --mark-compacted (or the reverse), and etcdutl's.
func restoreSnapshot(stdout io.Writer, cfg snapshot.RestoreConfig) error {
	if cfg.OutputDataDir == "" {
		return usageError("--data-dir is required: the new member's data directory")
	}
	if (cfg.RevisionBump > 0) != cfg.MarkCompacted {
		return usageError("--bump-revision and --mark-compacted go together")
	}
	if _, err := os.Stat(cfg.SnapshotPath); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if entries, err := os.ReadDir(cfg.OutputDataDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("--data-dir %s exists and is not empty: restore into a new directory (move the old one away first)", cfg.OutputDataDir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := snapshot.NewV3(zap.NewNop()).Restore(cfg); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Restored %s into %s: member %s, peer URLs %s, cluster %s\n",
		cfg.SnapshotPath, cfg.OutputDataDir, cfg.Name, strings.Join(cfg.PeerURLs, ","), cfg.InitialCluster)
	return nil
}

// snapshotStatus prints file's hash, revision, key count, size and storage version, as
// `etcdutl snapshot status -w table`.
func snapshotStatus(stdout io.Writer, file string) error {
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	status, err := snapshot.NewV3(zap.NewNop()).Status(file)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "HASH\tREVISION\tTOTAL KEYS\tTOTAL SIZE\tVERSION")
	fmt.Fprintf(w, "%x\t%d\t%d\t%d\t%s\n", status.Hash, status.Revision, status.TotalKey, status.TotalSize, status.Version)
	return w.Flush()
}
