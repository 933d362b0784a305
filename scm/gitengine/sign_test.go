package gitengine

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"golang.org/x/crypto/ssh"

	"github.com/prflow/prflow/scm"
)

// TestSSHSignedCommitVerifiesWithGit signs with an ed25519 key and has the git CLI verify it
// against an allowed-signers file, as a forge or a reviewer would.
func TestSSHSignedCommitVerifiesWithGit(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, seed, WithSigner(SSHSigner(signer)))
	res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "signed", Author: bot,
		Changes: []scm.FileChange{{Path: "s.txt", Content: []byte("s")}}})
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	line := bot.Email + ` namespaces="git" ` + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + "\n"
	if err := os.WriteFile(allowed, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	out := gitCLI(t, f.srv.Dir("acme", "deploy"), "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", "-v", res.SHA)
	if !strings.Contains(out, `Good "git" signature for `+bot.Email) {
		t.Fatalf("verify-commit: %s", out)
	}
}

func TestOpenPGPSignedCommitVerifies(t *testing.T) {
	key, err := openpgp.NewEntity("prflow bot", "", bot.Email, edKeys)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, seed, WithOpenPGPKey(key))
	res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "signed", Author: bot,
		Changes: []scm.FileChange{{Path: "s.txt", Content: []byte("s")}}})
	if err != nil {
		t.Fatal(err)
	}
	var pub strings.Builder
	aw, err := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := key.Serialize(aw); err != nil {
		t.Fatal(err)
	}
	aw.Close()
	w, err := f.engine.Open(ctxT(t), f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Fetch(ctxT(t), 1, "refs/heads/main"); err != nil {
		t.Fatal(err)
	}
	c, err := w.Commit(res.SHA)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.PGPSignature, "BEGIN PGP SIGNATURE") {
		t.Fatalf("no signature: %q", c.PGPSignature)
	}
	if _, err := c.Verify(pub.String()); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// A different key does not verify it.
	other, _ := openpgp.NewEntity("x", "", "x@y", edKeys)
	var otherPub strings.Builder
	aw, _ = armor.Encode(&otherPub, openpgp.PublicKeyType, nil)
	_ = other.Serialize(aw)
	aw.Close()
	if _, err := c.Verify(otherPub.String()); err == nil {
		t.Fatal("verified with the wrong key")
	}
}

// edKeys makes test keys fast to generate.
var edKeys = &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA}
