package scmtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxBody bounds request bodies the fakes read.
const maxBody = 32 << 20

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if v == nil {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// readJSON decodes a JSON body into v; an empty body leaves v untouched.
func readJSON(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil
	}
	return json.Unmarshal(data, v)
}

// isJSON reports whether the request carries a JSON body.
func isJSON(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// isoTime formats t as RFC 3339 in UTC, or JSON null for the zero time.
func isoTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

// milliTime formats t with milliseconds (GitLab style), or null.
func milliTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// stableID derives a positive id from a name, so the same user always gets the same id.
func stableID(s string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return int64(h.Sum64()>>34) + 1
}

// requestID returns a random hex id for request/delivery headers.
func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// uuid4 returns a random RFC 4122 version 4 UUID.
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// page describes the slice of a list a request asked for.
type page struct {
	page, perPage, total int
}

func (p page) bounds() (int, int) {
	start := (p.page - 1) * p.perPage
	if start > p.total {
		start = p.total
	}
	end := start + p.perPage
	if end > p.total {
		end = p.total
	}
	return start, end
}

func (p page) lastPage() int {
	if p.total == 0 {
		return 1
	}
	return (p.total + p.perPage - 1) / p.perPage
}

// parsePage reads page/per_page (or pagelen) query parameters.
func parsePage(r *http.Request, perName string, def, max, total int) page {
	q := r.URL.Query()
	p := page{page: 1, perPage: def, total: total}
	if v, err := strconv.Atoi(q.Get("page")); err == nil && v > 0 {
		p.page = v
	}
	if v, err := strconv.Atoi(q.Get(perName)); err == nil && v > 0 {
		p.perPage = min(v, max)
	}
	return p
}

// pageURL is the request URL with page replaced, on the given base (scheme://host).
func pageURL(base string, r *http.Request, n int) string {
	u := url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath}
	q := r.URL.Query()
	q.Set("page", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return base + u.RequestURI()
}

// linkHeader sets an RFC 5988 Link header with next/prev/first/last as GitHub and GitLab do.
func linkHeader(w http.ResponseWriter, base string, r *http.Request, p page) {
	var links []string
	last := p.lastPage()
	if p.page < last {
		links = append(links, fmt.Sprintf("<%s>; rel=\"next\"", pageURL(base, r, p.page+1)))
		links = append(links, fmt.Sprintf("<%s>; rel=\"last\"", pageURL(base, r, last)))
	}
	if p.page > 1 {
		links = append(links, fmt.Sprintf("<%s>; rel=\"first\"", pageURL(base, r, 1)))
		links = append(links, fmt.Sprintf("<%s>; rel=\"prev\"", pageURL(base, r, p.page-1)))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
}

// requestBase is scheme://host of the request, for links in answers.
func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// bearerOrBasic extracts a token from Authorization (Bearer, token or Basic password).
func bearerOrBasic(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, rest, _ := strings.Cut(h, " ")
	switch strings.ToLower(scheme) {
	case "bearer", "token":
		return strings.TrimSpace(rest), true
	case "basic":
		if _, pass, ok := r.BasicAuth(); ok {
			return pass, true
		}
	}
	return "", true
}

func short(sha string, n int) string {
	if len(sha) > n {
		return sha[:n]
	}
	return sha
}
