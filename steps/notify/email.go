package notify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
)

// email sends a plain-text mail over SMTP (net/smtp): STARTTLS unless turned off, PLAIN auth
// when a username is set (net/smtp refuses it over an unencrypted link except to localhost).
type email struct {
	addr, host string
	starttls   bool
	user       string
	pass       connector.Secret
	from       *mail.Address
	to         []*mail.Address
	subject    string
	tlsConfig  *tls.Config // tests: trust a local server's certificate
}

func (e *email) secrets() []string { return []string{e.pass.Value()} }

func (e *email) send(ctx context.Context, n steps.Notification) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", e.addr)
	if err != nil {
		return fmt.Errorf("connect to the SMTP server %s: %w", e.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, e.host)
	if err != nil {
		_ = conn.Close()
		return smtpErr("greeting", err)
	}
	defer c.Close()
	if err := c.Hello("prflow"); err != nil {
		return smtpErr("EHLO", err)
	}
	if e.starttls {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return steps.Terminalf("the SMTP server %s does not offer STARTTLS (set smtp.starttls: false only for a trusted local relay)", e.addr)
		}
		cfg := &tls.Config{ServerName: e.host, MinVersion: tls.VersionTLS12}
		if e.tlsConfig != nil {
			cfg = e.tlsConfig.Clone()
		}
		if err := c.StartTLS(cfg); err != nil {
			return smtpErr("STARTTLS", err)
		}
	}
	if e.user != "" {
		if err := c.Auth(smtp.PlainAuth("", e.user, e.pass.Value(), e.host)); err != nil {
			return smtpErr("AUTH", err)
		}
	}
	if err := c.Mail(e.from.Address); err != nil {
		return smtpErr("MAIL FROM", err)
	}
	for _, t := range e.to {
		if err := c.Rcpt(t.Address); err != nil {
			return smtpErr("RCPT TO "+t.Address, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return smtpErr("DATA", err)
	}
	if _, err := w.Write(e.message(n)); err != nil {
		return smtpErr("DATA", err)
	}
	if err := w.Close(); err != nil {
		return smtpErr("end of DATA", err)
	}
	_ = c.Quit()
	return nil
}

// message is the mail: headers, then the body with CRLF line ends. Its Message-ID is derived
// from the notification id, so a repeat is recognisable as the same mail.
func (e *email) message(n steps.Notification) []byte {
	subject := e.subject
	if subject == "" {
		subject = Summary(n)
	} else {
		subject += ": " + Summary(n)
	}
	var to []string
	for _, a := range e.to {
		to = append(to, a.String())
	}
	sum := sha256.Sum256([]byte(n.ID))
	var b bytes.Buffer
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", e.from.String())
	h("To", strings.Join(to, ", "))
	h("Subject", mime.QEncoding.Encode("utf-8", subject))
	h("Date", n.Time.Format(time.RFC1123Z))
	h("Message-ID", "<"+hex.EncodeToString(sum[:16])+"@prflow>")
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "8bit")
	h("X-Prflow-Event", n.Event)
	h("X-Prflow-Run", n.Run)
	b.WriteString("\r\n")
	text := strings.ReplaceAll(body(n), "\r\n", "\n")
	b.WriteString(strings.ReplaceAll(text, "\n", "\r\n"))
	return b.Bytes()
}

// smtpErr classifies an SMTP failure: 4xx replies are transient (greylisting, a full queue),
// 5xx are terminal (a refused recipient, failed auth); network errors are transient.
func smtpErr(stage string, err error) error {
	var te *textproto.Error
	if errors.As(err, &te) {
		if te.Code >= 500 {
			return steps.Terminalf("SMTP %s refused: %d %s", stage, te.Code, te.Msg)
		}
		return fmt.Errorf("SMTP %s: %d %s", stage, te.Code, te.Msg)
	}
	return fmt.Errorf("SMTP %s: %w", stage, err)
}
