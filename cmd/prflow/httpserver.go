package main

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// httpTimeouts bound how long a client may hold a connection without getting on with its
// request. There is no server-wide ReadTimeout or WriteTimeout: the web UI's live pages are
// server-sent event streams and `logs?follow=1` streams too, which stay open for as long as
// the run is watched; a body's read deadline is set per request instead (bodyDeadline).
type httpTimeouts struct {
	Header time.Duration // request line and headers (ReadHeaderTimeout)
	Body   time.Duration // a request's whole body, from the end of its headers
	Idle   time.Duration // a kept-alive connection between requests
}

// defaultHTTPTimeouts: headers in 10 s; a body (a 25 MiB webhook at ~7 Mbit/s) in 30 s;
// idle keep-alive connections close after 2 minutes.
var defaultHTTPTimeouts = httpTimeouts{Header: 10 * time.Second, Body: 30 * time.Second, Idle: 2 * time.Minute}

// newHTTPServer is every HTTP server prflow starts: h behind the timeouts t.
func newHTTPServer(h http.Handler, t httpTimeouts) *http.Server {
	return &http.Server{Handler: bodyDeadline(h, t.Body), ReadHeaderTimeout: t.Header, IdleTimeout: t.Idle}
}

// bodyDeadline gives a request that has a body d to send all of it: a client that trickles
// its body (slowloris) has its reads fail with os.ErrDeadlineExceeded and its connection
// closed. The deadline is lifted once the body has been read to its end, so a handler that
// answers at length afterwards is not cut off (net/http's watch for the client going away
// reads under the same deadline). A body left unread keeps it: the server drains some of it
// after the handler, and a trickle must not hold that up either.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			http.Error(w, "cannot set a read deadline", http.StatusInternalServerError)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the connection's read deadline when its body is done.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.lift()
	}
	return n, err
}

func (b *deadlineBody) lift() { b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) }) }
