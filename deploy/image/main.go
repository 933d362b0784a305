// Command image builds prflow's container image without a container daemon: it cross-builds a
// static binary (CGO_ENABLED=0), puts it in one layer on an empty base together with a CA bundle,
// /etc/passwd and /etc/group entries for a non-root user and a world-writable /tmp, sets the
// entrypoint, user and OCI labels, and writes an OCI image layout (for registries, crane, skopeo)
// and a tarball that `docker load` / `podman load` read.
//
//	go run ./deploy/image [-arch amd64] [-version v] [-tag ref] [-oci dir] [-tar file]
//
// There is no base image: the machines that build prflow reach no container registry, and the
// binary needs nothing from one. The Dockerfile at the repo root builds the same image with a
// daemon, from the same files.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: not root, the uid distroless and many base images use for "nonroot".
const (
	UID      = 65532
	GID      = 65532
	UserName = "prflow"
	// BinPath is the entrypoint; the role is the first argument (server, worker, agent).
	BinPath = "/usr/local/bin/prflow"
	// CABundlePath is where Go's crypto/x509 looks first on Linux.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
)

// Options say what to build and from what.
type Options struct {
	Root    string // module root (the directory holding go.mod)
	Arch    string // GOARCH of the image (linux only)
	Version string // stamped into the binary (main.version) and the image labels
	CAFile  string // CA bundle copied into the image
	Binary  string // use this prebuilt linux binary instead of building one (tests, CI caches)
	// Revision and Created are the commit and its time (labels, and every timestamp in the image
	// so that two builds of one commit give one digest); empty: no revision label, Unix epoch.
	Revision string
	Created  time.Time
}

func main() {
	var o Options
	var ociDir, tarFile, tag string
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH of the image (the OS is linux)")
	flag.StringVar(&o.Version, "version", "", "version stamped into the binary and labels (default dev-<commit>)")
	flag.StringVar(&o.CAFile, "ca-file", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put in the image")
	flag.StringVar(&tag, "tag", "prflow:dev", "image reference recorded in the tarball and the layout's index")
	flag.StringVar(&ociDir, "oci", "dist/prflow-oci", "directory to write the OCI image layout to (\"\" = none)")
	flag.StringVar(&tarFile, "tar", "dist/prflow-image.tar", "file to write the docker-load tarball to (\"\" = none)")
	flag.Parse()
	if err := run(context.Background(), o, tag, ociDir, tarFile); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o Options, tag, ociDir, tarFile string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	o.Root = root
	o.Revision, o.Created = commitOf(ctx, root)
	if o.Version == "" {
		o.Version = "dev"
		if o.Revision != "" {
			o.Version = "dev-" + o.Revision[:12]
		}
	}
	start := time.Now()
	img, err := Build(ctx, o)
	if err != nil {
		return err
	}
	if ociDir != "" {
		if err := WriteLayout(ociDir, img, tag); err != nil {
			return err
		}
	}
	if tarFile != "" {
		if err := WriteTarball(tarFile, img, tag); err != nil {
			return err
		}
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("built %s (%s, linux/%s, version %s) in %s\n", tag, d, o.Arch, o.Version, time.Since(start).Round(time.Second))
	if ociDir != "" {
		fmt.Printf("  OCI layout: %s   (crane push %s REGISTRY/prflow:%s  or  skopeo copy oci:%s docker://…)\n", ociDir, ociDir, o.Version, ociDir)
	}
	if tarFile != "" {
		fmt.Printf("  tarball:    %s   (docker load -i %s)\n", tarFile, tarFile)
	}
	return nil
}

// Build returns the image. It builds the binary into a temporary directory unless o.Binary is set.
func Build(ctx context.Context, o Options) (v1.Image, error) {
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.Version == "" {
		return nil, errors.New("no version to stamp")
	}
	ca, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA bundle (-ca-file): %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", o.CAFile)
	}
	bin := o.Binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "prflow-image-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "prflow")
		if err := BuildBinary(ctx, o.Root, o.Arch, o.Version, bin); err != nil {
			return nil, err
		}
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	license, err := os.ReadFile(filepath.Join(o.Root, "LICENSE"))
	if err != nil {
		return nil, fmt.Errorf("LICENSE: %w", err)
	}
	created, revision := o.Created.UTC(), o.Revision
	if o.Created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}
	layerTar, err := rootfs(created, exe, ca, license)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching) // compressed once, not for the digest and again for each writer
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "go run ./deploy/image", Comment: "prflow " + o.Version}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: created}
	labels := map[string]string{
		"org.opencontainers.image.title":       "prflow",
		"org.opencontainers.image.description": "GitOps PR pipelines on NATS JetStream: prflow server | worker | agent",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      "https://github.com/prflow/prflow",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if revision != "" {
		labels["org.opencontainers.image.revision"] = revision
	}
	cf.Config = v1.Config{
		Entrypoint: []string{BinPath},
		User:       fmt.Sprintf("%d:%d", UID, GID),
		WorkingDir: "/tmp",
		Env: []string{
			"PATH=/usr/local/bin",
			"SSL_CERT_FILE=" + CABundlePath,
			"HOME=/tmp", // go-git looks for a global git config there; /tmp is the one writable place
		},
		Labels: labels,
	}
	return mutate.ConfigFile(img, cf)
}

// BuildBinary cross-builds a static prflow for linux/arch.
func BuildBinary(ctx context.Context, root, arch, version, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/prflow")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/prflow for linux/%s: %w\n%s", arch, err, b)
	}
	return nil
}

// rootfs is the image's only layer.
func rootfs(mtime time.Time, exe, ca, license []byte) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/tmp:/sbin/nologin\n", UserName, UID, GID, UserName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, GID)
	type entry struct {
		name string
		mode int64
		dir  bool
		data []byte
	}
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(CABundlePath, "/"), mode: 0o644, data: ca},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(BinPath, "/"), mode: 0o755, data: exe},
		{name: "usr/share/", mode: 0o755, dir: true},
		{name: "usr/share/doc/", mode: 0o755, dir: true},
		{name: "usr/share/doc/prflow/", mode: 0o755, dir: true},
		{name: "usr/share/doc/prflow/LICENSE", mode: 0o644, data: license},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as the only image of an OCI layout at dir (replacing an earlier layout).
func WriteLayout(dir string, img v1.Image, tag string) error {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	} else if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("-oci %s: exists and is not an OCI layout; not overwriting it", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return nil
}

// WriteTarball writes img in the format `docker load` reads.
func WriteTarball(file string, img v1.Image, tag string) error {
	ref, err := name.ParseReference(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(file, ref, img); err != nil {
		return fmt.Errorf("tarball %s: %w", file, err)
	}
	return nil
}

// commitOf returns the checked-out commit and its commit time, or nothing outside a git
// checkout (the image then carries no revision label and epoch timestamps).
func commitOf(ctx context.Context, root string) (string, time.Time) {
	cmd := exec.CommandContext(ctx, "git", "log", "-1", "--format=%H %ct")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", time.Time{}
	}
	rev, ts, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || len(rev) < 12 {
		return "", time.Time{}
	}
	return rev, time.Unix(sec, 0).UTC()
}

// moduleRoot is the nearest directory upwards holding prflow's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/prflow/prflow\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the prflow repository: no go.mod of github.com/prflow/prflow above the working directory")
		}
		dir = parent
	}
}
