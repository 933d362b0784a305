package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const testVersion = "v0.0.0-imagetest"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// testBinary cross-builds prflow once for all tests (the same command `task image` runs).
func testBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			binErr = err
			return
		}
		dir, err := os.MkdirTemp("", "prflow-imagetest-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "prflow")
		// Stop the compile before the test binary's deadline, so a slow machine gets a clear
		// failure instead of a timeout panic (CI builds the image first: this only relinks).
		ctx := context.Background()
		if d, ok := t.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
			defer cancel()
		}
		binErr = BuildBinary(ctx, root, "amd64", testVersion, binPath)
		if ctx.Err() != nil {
			binErr = fmt.Errorf("building the binary did not finish before the test deadline (cold build cache on a slow machine? "+
				"`go run ./deploy/image` first warms it): %w", binErr)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func testOptions(t *testing.T) Options {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rev, created := commitOf(context.Background(), root)
	return Options{Root: root, Arch: "amd64", Version: testVersion, CAFile: "/etc/ssl/certs/ca-certificates.crt",
		Binary: testBinary(t), Revision: rev, Created: created}
}

// The image written to disk (OCI layout and docker tarball) is opened again and checked: what
// a runtime would start, as whom, and that the binary in the layer runs.
func TestImageBuiltAndOpened(t *testing.T) {
	img, err := Build(context.Background(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ociDir, tarFile := filepath.Join(dir, "oci"), filepath.Join(dir, "image.tar")
	if err := WriteLayout(ociDir, img, "prflow:test"); err != nil {
		t.Fatal(err)
	}
	if err := WriteTarball(tarFile, img, "prflow:test"); err != nil {
		t.Fatal(err)
	}

	// Open the layout as a registry tool would.
	p, err := layout.FromPath(ociDir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "prflow:test" {
		t.Fatalf("layout index: %+v", im.Manifests)
	}
	got, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	// The tarball holds the same config and layer (docker's format rewrites the manifest, so
	// the manifest digests differ by design).
	fromTar, err := tarball.ImageFromPath(tarFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := got.ConfigName()
	c2, _ := fromTar.ConfigName()
	l1, _ := got.Layers()
	l2, _ := fromTar.Layers()
	if c1 != c2 || len(l1) != 1 || len(l2) != 1 {
		t.Fatalf("layout config %s (%d layers) != tarball config %s (%d layers)", c1, len(l1), c2, len(l2))
	}
	if d1, _ := l1[0].DiffID(); true {
		if d2, _ := l2[0].DiffID(); d1 != d2 {
			t.Errorf("layout layer %s != tarball layer %s", d1, d2)
		}
	}

	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != BinPath || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint %v cmd %v, want [%s] and the role as argument", cf.Config.Entrypoint, cf.Config.Cmd, BinPath)
	}
	uid, gid, ok := strings.Cut(cf.Config.User, ":")
	if n, err := strconv.Atoi(uid); !ok || err != nil || n == 0 {
		t.Errorf("user %q: want a numeric non-root uid:gid (Kubernetes runAsNonRoot needs a number)", cf.Config.User)
	}
	for k, want := range map[string]string{"org.opencontainers.image.licenses": "Apache-2.0", "org.opencontainers.image.version": testVersion} {
		if cf.Config.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], want)
		}
	}
	if o := testOptions(t); o.Revision != "" {
		if cf.Config.Labels["org.opencontainers.image.revision"] != o.Revision || !cf.Created.Time.Equal(o.Created) {
			t.Errorf("revision label %q created %s, want the commit %s of %s", cf.Config.Labels["org.opencontainers.image.revision"], cf.Created, o.Revision, o.Created)
		}
	} else if _, err := os.Stat(filepath.Join(o.Root, ".git")); err == nil {
		t.Errorf("in a git checkout, but no commit found")
	}

	files := extract(t, got)
	exe := files[strings.TrimPrefix(BinPath, "/")]
	if exe == nil || exe.Mode&0o111 == 0 {
		t.Fatalf("%s missing or not executable", BinPath)
	}
	if h := files["etc/passwd"]; h == nil || !strings.Contains(string(h.data), UserName+":x:"+uid+":"+gid+":") {
		t.Errorf("/etc/passwd has no entry for %s", cf.Config.User)
	}
	if h := files["tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp missing or not world-writable with the sticky bit: %+v", h)
	}
	ca := files[strings.TrimPrefix(CABundlePath, "/")]
	if ca == nil {
		t.Fatal("no CA bundle")
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(ca.data) {
		t.Error("the CA bundle holds no certificate")
	}
	if files["usr/share/doc/prflow/LICENSE"] == nil {
		t.Error("no LICENSE in the image")
	}

	// Static: no ELF interpreter, so it runs on an empty base.
	bin := filepath.Join(t.TempDir(), "prflow")
	if err := os.WriteFile(bin, exe.data, 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked (has PT_INTERP): it cannot run FROM scratch")
		}
	}
	ef.Close()

	// The binary from the layer runs and reports the version it was stamped with.
	out, err := runVersion(bin)
	if err != nil {
		t.Fatalf("prflow version: %v\n%s", err, out)
	}
	if !strings.Contains(out, testVersion) {
		t.Errorf("prflow version printed %q, want %s", out, testVersion)
	}
}

// runVersion runs `prflow version`; until that subcommand exists it falls back to cobra's
// `--version` flag (both print main.version).
func runVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil && strings.Contains(string(out), "unknown command") {
		out, err = exec.Command(bin, "--version").CombinedOutput()
	}
	return string(out), err
}

type file struct {
	*tar.Header
	data []byte
}

// extract reads the image's flattened filesystem, as a runtime unpacks it.
func extract(t *testing.T, img v1.Image) map[string]*file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = &file{Header: h, data: buf.Bytes()}
	}
}

// smallBinaryOptions are testOptions with a small stand-in for the binary: these tests look at
// the image around it, and compressing the real 40 MB binary under -race takes minutes.
func smallBinaryOptions(t *testing.T) Options {
	o := testOptions(t)
	o.Binary = filepath.Join(t.TempDir(), "prflow")
	if err := os.WriteFile(o.Binary, []byte("\x7fELF stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	return o
}

// Two builds of one binary give one digest (timestamps come from the commit, not the clock).
func TestImageReproducible(t *testing.T) {
	o := smallBinaryOptions(t)
	a, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds: %s != %s", da, db)
	}
}

func TestImageBuildErrors(t *testing.T) {
	base := smallBinaryOptions(t)
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"missing CA bundle", func(o *Options) { o.CAFile = "/nonexistent/ca.crt" }, "CA bundle (-ca-file): open /nonexistent/ca.crt"},
		{"CA bundle without certificates", func(o *Options) { o.CAFile = empty }, "holds no PEM certificate"},
		{"missing binary", func(o *Options) { o.Binary = "/nonexistent/prflow" }, "binary: open /nonexistent/prflow"},
		{"no version", func(o *Options) { o.Version = "" }, "no version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			_, err := Build(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want %q, got %v", tc.want, err)
			}
		})
	}
	// A failing compile names the target and shows the compiler's output.
	err := BuildBinary(context.Background(), base.Root, "no-such-arch", "x", filepath.Join(t.TempDir(), "p"))
	if err == nil || !strings.Contains(err.Error(), "linux/no-such-arch") {
		t.Errorf("bad arch: %v", err)
	}
	// The layout writer does not clobber a directory that is not a layout.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := Build(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, img, "prflow:test"); err == nil || !strings.Contains(err.Error(), "not an OCI layout") {
		t.Errorf("non-layout dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Errorf("the directory's file is gone: %v", err)
	}
	if err := WriteTarball(filepath.Join(dir, "x.tar"), img, "Not A Valid:Ref:"); err == nil || !strings.Contains(err.Error(), "-tag") {
		t.Errorf("bad tag: %v", err)
	}
}
