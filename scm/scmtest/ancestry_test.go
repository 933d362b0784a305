package scmtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// ancestryRepo seeds owner/name on f with root → c1 on main, a sibling commit on branch
// "side" from root, and an orphan commit (same tree, no parents) on no branch.
func ancestryRepo(t *testing.T, f *Forge, owner, name string) (root, c1, side, orphan string) {
	t.Helper()
	var err error
	if root, err = f.CreateRepo(owner, name, map[string]string{"a.txt": "a\n"}); err != nil {
		t.Fatal(err)
	}
	if c1, err = f.Git().Commit(owner, name, "main", map[string]string{"a.txt": "a1\n"}, nil, "c1"); err != nil {
		t.Fatal(err)
	}
	rs, err := f.repoState(owner, name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rs.repo.updateRef(ctx, "refs/heads/side", root, ""); err != nil {
		t.Fatal(err)
	}
	if side, err = f.Git().Commit(owner, name, "side", map[string]string{"b.txt": "b\n"}, nil, "side"); err != nil {
		t.Fatal(err)
	}
	tree, err := rs.repo.resolveTree(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	sig := Signature{Name: "t", Email: "t@example.com", When: time.Unix(1700000000, 0).UTC()}
	if orphan, err = rs.repo.commitTree(ctx, tree, nil, "orphan", sig, sig); err != nil {
		t.Fatal(err)
	}
	return root, c1, side, orphan
}

func getJSON(t *testing.T, u string, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return resp.StatusCode, m
}

func TestGitLabMergeBase(t *testing.T) {
	g := NewGitLab(t)
	root, c1, side, orphan := ancestryRepo(t, g.Forge, "group/sub", "release")
	base := g.APIURL() + "/projects/" + url.PathEscape("group/sub/release") + "/repository/merge_base"
	hdr := map[string]string{"PRIVATE-TOKEN": DefaultToken}
	q := func(refs ...string) string {
		v := url.Values{}
		for _, r := range refs {
			v.Add("refs[]", r)
		}
		return base + "?" + v.Encode()
	}
	cases := []struct {
		name   string
		refs   []string
		status int
		id     string
		msg    string
	}{
		{"ancestor", []string{root, c1}, 200, root, ""},
		{"reverse order", []string{c1, root}, 200, root, ""},
		{"siblings", []string{c1, side}, 200, root, ""},
		{"branch names", []string{"main", "side"}, 200, root, ""},
		{"unrelated", []string{c1, orphan}, 404, "", "404 Merge Base Not Found"},
		{"unknown ref", []string{c1, strings.Repeat("e", 40)}, 400, "", "Could not find ref: " + strings.Repeat("e", 40)},
		{"one ref", []string{c1}, 400, "", "Provide at least 2 refs"},
	}
	for _, c := range cases {
		status, m := getJSON(t, q(c.refs...), hdr)
		if status != c.status || (c.id != "" && m["id"] != c.id) || (c.msg != "" && m["message"] != c.msg) {
			t.Errorf("%s: %d %v, want %d id %s message %q", c.name, status, m, c.status, c.id, c.msg)
		}
	}
}

func TestBitbucketMergeBase(t *testing.T) {
	b := NewBitbucket(t)
	root, c1, side, orphan := ancestryRepo(t, b.Forge, "acme", "release")
	hdr := map[string]string{"Authorization": "Bearer " + DefaultToken}
	cases := []struct {
		name   string
		spec   string
		status int
		hash   string
	}{
		{"ancestor", root + ".." + c1, 200, root},
		{"siblings", c1 + ".." + side, 200, root},
		{"unrelated", c1 + ".." + orphan, 404, ""},
		{"unknown", c1 + ".." + strings.Repeat("e", 40), 404, ""},
		{"not a range", c1, 400, ""},
	}
	for _, c := range cases {
		status, m := getJSON(t, b.APIURL()+"/repositories/acme/release/merge-base/"+c.spec, hdr)
		if status != c.status || (c.hash != "" && (m["hash"] != c.hash || m["type"] != "commit")) {
			t.Errorf("%s: %d %v, want %d hash %s", c.name, status, m, c.status, c.hash)
		}
	}
}

func TestGitHubCompareStatuses(t *testing.T) {
	g := NewGitHub(t)
	root, c1, side, orphan := ancestryRepo(t, g.Forge, "acme", "release")
	hdr := map[string]string{"Authorization": "token " + DefaultToken}
	cases := []struct {
		name, base, head string
		status           int
		want             string
	}{
		{"ahead", root, c1, 200, "ahead"},
		{"identical", c1, c1, 200, "identical"},
		{"behind", c1, root, 200, "behind"},
		{"diverged", c1, side, 200, "diverged"},
		{"unrelated", c1, orphan, 404, ""},
	}
	for _, c := range cases {
		status, m := getJSON(t, g.APIURL()+"repos/acme/release/compare/"+c.base+"..."+c.head+"?per_page=1", hdr)
		if status != c.status || (c.want != "" && m["status"] != c.want) {
			t.Errorf("%s: %d %v, want %d %s", c.name, status, m["status"], c.status, c.want)
		}
		if c.status == 404 && !strings.Contains(m["message"].(string), "No common ancestor") {
			t.Errorf("%s: message %v", c.name, m["message"])
		}
	}
}
