package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// ParseWorkerLog reads one worker process's JSON log (--log-format json --log-level debug)
// and returns its step executions from the "job started" / "job returned" lines. An
// execution that never returned ended when the process ended: at exitAt, killed says how.
func ParseWorkerLog(r io.Reader, worker string, exitAt time.Time, killed bool) ([]Exec, error) {
	open := map[string][]time.Time{} // job → starts not yet returned (a job may run on two slots)
	var out []Exec
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' {
			continue // a panic trace or other non-JSON output
		}
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Job  string    `json:"job"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			// A SIGKILL can cut the last line short.
			continue
		}
		switch l.Msg {
		case "job started":
			if l.Job == "" {
				return nil, fmt.Errorf("worker %s log line %d: job started without a job id", worker, line)
			}
			open[l.Job] = append(open[l.Job], l.Time)
		case "job returned":
			starts := open[l.Job]
			if len(starts) == 0 {
				return nil, fmt.Errorf("worker %s log line %d: job %s returned without having started", worker, line, l.Job)
			}
			out = append(out, Exec{Job: l.Job, Worker: worker, Start: starts[0], End: l.Time})
			open[l.Job] = starts[1:]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("worker %s log: %w", worker, err)
	}
	for job, starts := range open {
		for _, s := range starts {
			out = append(out, Exec{Job: job, Worker: worker, Start: s, End: exitAt, Killed: killed})
		}
	}
	return out, nil
}

// CrashLine returns the first line of a process's output that shows it crashed: a Go panic,
// a fatal runtime error or a race detector report; "" when there is none. SIGKILL leaves no
// such line.
func CrashLine(r io.Reader) string {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := sc.Text()
		for _, p := range []string{"panic: ", "fatal error: ", "WARNING: DATA RACE"} {
			if strings.HasPrefix(l, p) {
				return l
			}
		}
	}
	return ""
}

// HandBackLine is the message a worker logs when a job reached it with no free slot and
// was handed back unrun (queue.Puller): a delivery spent without a run, the way a job ran
// out of deliveries with its worker alive (issue 32, item 8).
const HandBackLine = "job delivered with no free slot; handed back"

// HandBacks returns the times of a worker's HandBackLine lines (a rate-limited line says how
// many it stands for in "repeated"; each counts once plus those).
func HandBacks(r io.Reader) []time.Time {
	var out []time.Time
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' {
			continue
		}
		var l struct {
			Time     time.Time `json:"time"`
			Msg      string    `json:"msg"`
			Repeated int       `json:"repeated"`
		}
		if json.Unmarshal(b, &l) != nil || l.Msg != HandBackLine {
			continue
		}
		for range 1 + l.Repeated {
			out = append(out, l.Time)
		}
	}
	return out
}
