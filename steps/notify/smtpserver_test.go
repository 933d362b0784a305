package notify

import (
	"bufio"
	"encoding/base64"
	"net"
	"strings"
	"sync"
	"testing"
)

// SMTPServer is a small SMTP server for tests: it speaks enough of RFC 5321 for net/smtp
// (EHLO, AUTH PLAIN, MAIL, RCPT, DATA, RSET, NOOP, QUIT), keeps every mail it accepts, and can
// be told to answer RCPT with an error for a while. It is exported to the package's external
// tests (e2e_test.go).
type SMTPServer struct {
	Addr string

	mu         sync.Mutex
	user, pass string // AUTH PLAIN must match when user is set
	mails      []Mail
	rcptFail   []string // replies to RCPT, used up one per mail attempt
	sessions   int
	ln         net.Listener
}

// Mail is one accepted message.
type Mail struct {
	From string
	To   []string
	Data string
	Auth string // "user:pass" it authenticated with
}

// NewSMTPServer listens on 127.0.0.1 until the test ends.
func NewSMTPServer(t testing.TB) *SMTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &SMTPServer{Addr: ln.Addr().String(), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return s
}

// SetAuth makes the server require AUTH PLAIN with user and pass.
func (s *SMTPServer) SetAuth(user, pass string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.user, s.pass = user, pass
}

// FailRCPT makes the next len(replies) mail attempts fail at RCPT with these replies
// (e.g. "451 4.3.0 try later", "550 5.1.1 no such user").
func (s *SMTPServer) FailRCPT(replies ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rcptFail = append(s.rcptFail, replies...)
}

// Mails returns the accepted mails.
func (s *SMTPServer) Mails() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mail(nil), s.mails...)
}

// Sessions counts connections.
func (s *SMTPServer) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions
}

func (s *SMTPServer) serve(c net.Conn) {
	defer c.Close()
	s.mu.Lock()
	s.sessions++
	user, pass := s.user, s.pass
	s.mu.Unlock()
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	say := func(lines ...string) {
		for _, l := range lines {
			_, _ = w.WriteString(l + "\r\n")
		}
		_ = w.Flush()
	}
	say("220 localhost test SMTP")
	var cur Mail
	authed := user == ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb := strings.ToUpper(strings.SplitN(line, " ", 2)[0])
		switch verb {
		case "EHLO":
			say("250-localhost", "250-AUTH PLAIN", "250 8BITMIME")
		case "HELO", "NOOP":
			say("250 ok")
		case "AUTH":
			parts := strings.Fields(line)
			if len(parts) != 3 || strings.ToUpper(parts[1]) != "PLAIN" {
				say("504 only AUTH PLAIN with an initial response")
				continue
			}
			raw, err := base64.StdEncoding.DecodeString(parts[2])
			f := strings.Split(string(raw), "\x00")
			if err != nil || len(f) != 3 || f[1] != user || f[2] != pass {
				say("535 5.7.8 authentication failed")
				continue
			}
			authed, cur.Auth = true, f[1]+":"+f[2]
			say("235 2.7.0 ok")
		case "MAIL":
			if !authed {
				say("530 5.7.0 authentication required")
				continue
			}
			cur.From, cur.To = between(line, "<", ">"), nil
			say("250 ok")
		case "RCPT":
			s.mu.Lock()
			var fail string
			if len(s.rcptFail) > 0 {
				fail, s.rcptFail = s.rcptFail[0], s.rcptFail[1:]
			}
			s.mu.Unlock()
			if fail != "" {
				say(fail)
				continue
			}
			cur.To = append(cur.To, between(line, "<", ">"))
			say("250 ok")
		case "DATA":
			say("354 end with <CRLF>.<CRLF>")
			var b strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				b.WriteString(strings.TrimPrefix(l, "."))
			}
			cur.Data = b.String()
			s.mu.Lock()
			s.mails = append(s.mails, cur)
			s.mu.Unlock()
			cur = Mail{Auth: cur.Auth}
			say("250 ok: queued")
		case "RSET":
			cur = Mail{Auth: cur.Auth}
			say("250 ok")
		case "QUIT":
			say("221 bye")
			return
		default:
			say("502 command not implemented")
		}
	}
}

func between(s, a, b string) string {
	i := strings.Index(s, a)
	j := strings.LastIndex(s, b)
	if i < 0 || j <= i {
		return ""
	}
	return s[i+1 : j]
}
