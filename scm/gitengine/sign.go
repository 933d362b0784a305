package gitengine

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/ProtonMail/go-crypto/openpgp"
	git "github.com/go-git/go-git/v5"
	"golang.org/x/crypto/ssh"
)

// OpenPGPSigner signs commits with an OpenPGP entity (its private key must be decrypted), as
// `git commit -S` with gpg.format=openpgp does.
func OpenPGPSigner(key *openpgp.Entity) git.Signer { return &pgpSigner{key: key} }

type pgpSigner struct{ key *openpgp.Entity }

func (s *pgpSigner) Sign(message io.Reader) ([]byte, error) {
	if s.key == nil || s.key.PrivateKey == nil {
		return nil, errors.New("openpgp signer: no private key")
	}
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.key, message, nil); err != nil {
		return nil, fmt.Errorf("openpgp signer: %w", err)
	}
	return b.Bytes(), nil
}

// SSHSigner signs commits with an SSH key in the SSHSIG format that git uses with
// gpg.format=ssh (namespace "git", SHA-512), so `git verify-commit` accepts them given an
// allowed-signers file. RSA keys sign with rsa-sha2-512.
func SSHSigner(key ssh.Signer) git.Signer { return &sshSigner{key: key} }

type sshSigner struct{ key ssh.Signer }

const (
	sshsigMagic     = "SSHSIG"
	sshsigNamespace = "git"
	sshsigHash      = "sha512"
)

func (s *sshSigner) Sign(message io.Reader) ([]byte, error) {
	if s.key == nil {
		return nil, errors.New("ssh signer: no key")
	}
	h := sha512.New()
	if _, err := io.Copy(h, message); err != nil {
		return nil, fmt.Errorf("ssh signer: read message: %w", err)
	}
	signed := append([]byte(sshsigMagic), ssh.Marshal(struct {
		Namespace, Reserved, Hash, Digest string
	}{sshsigNamespace, "", sshsigHash, string(h.Sum(nil))})...)

	var sig *ssh.Signature
	var err error
	if as, ok := s.key.(ssh.AlgorithmSigner); ok && s.key.PublicKey().Type() == ssh.KeyAlgoRSA {
		sig, err = as.SignWithAlgorithm(rand.Reader, signed, ssh.KeyAlgoRSASHA512)
	} else {
		sig, err = s.key.Sign(rand.Reader, signed)
	}
	if err != nil {
		return nil, fmt.Errorf("ssh signer: %w", err)
	}
	blob := append([]byte(sshsigMagic), ssh.Marshal(struct {
		Version   uint32
		PublicKey string
		Namespace string
		Reserved  string
		Hash      string
		Signature string
	}{1, string(s.key.PublicKey().Marshal()), sshsigNamespace, "", sshsigHash, string(ssh.Marshal(sig))})...)

	enc := base64.StdEncoding.EncodeToString(blob)
	var out bytes.Buffer
	out.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(enc) > 70 {
		out.WriteString(enc[:70])
		out.WriteByte('\n')
		enc = enc[70:]
	}
	out.WriteString(enc)
	out.WriteString("\n-----END SSH SIGNATURE-----")
	return out.Bytes(), nil
}
