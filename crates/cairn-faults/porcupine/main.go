// Command cairn-porcupine checks register histories recorded by the Cairn fault
// harness (cairn-faults) for linearizability with porcupine.
//
// Input: a file of JSON lines, one event each:
//
//	{"process":3,"type":"invoke","f":"cas","key":"r7","value":5,"expected":4,"time":1234}
//
// type is invoke, ok, fail (the operation certainly had no effect; with "error" set it
// failed with that error, without a cas comparing anything) or info (its outcome is
// unknown: a timeout, a lost connection). f is read, write or cas. For a read, value
// is what it returned (null: no row); for a write, the value written; for a cas, the
// new value and expected the value it compared with. Each process runs one operation at
// a time, so an invoke is completed by the next event of the same process.
//
// Output: one JSON object on stdout (keys, operations, result, and for a violation
// the key whose history failed, with that history). With -visualize PATH a failing
// check also writes porcupine's HTML visualization. Exit status: 0 linearizable,
// 1 not linearizable, 2 bad input or timeout.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

type event struct {
	Process  int    `json:"process"`
	Type     string `json:"type"`
	F        string `json:"f"`
	Key      string `json:"key"`
	Value    *int64 `json:"value"`
	Expected *int64 `json:"expected"`
	Error    string `json:"error"`
	Time     int64  `json:"time"`
}

type input struct {
	F        string
	Key      string
	Value    *int64
	Expected *int64
}

// output of an operation: Known is false when the outcome is unknown (info).
type output struct {
	Known bool
	Ok    bool
	Value *int64
}

// state: the register's value, or nil when there is no row.
type state struct {
	Set   bool
	Value int64
}

func same(s state, v *int64) bool {
	if v == nil {
		return !s.Set
	}
	return s.Set && s.Value == *v
}

var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return state{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s := st.(state)
		i := in.(input)
		o := out.(output)
		switch i.F {
		case "read":
			return same(s, o.Value), s
		case "write":
			return true, state{Set: true, Value: *i.Value}
		case "cas":
			matches := same(s, i.Expected)
			if !o.Known {
				if matches {
					return true, state{Set: true, Value: *i.Value}
				}
				return true, s
			}
			if o.Ok {
				if !matches {
					return false, s
				}
				return true, state{Set: true, Value: *i.Value}
			}
			return !matches, s
		}
		return false, s
	},
	DescribeOperation: func(in, out interface{}) string {
		i := in.(input)
		o := out.(output)
		show := func(v *int64) string {
			if v == nil {
				return "nil"
			}
			return fmt.Sprint(*v)
		}
		switch i.F {
		case "read":
			return fmt.Sprintf("read(%s) -> %s", i.Key, show(o.Value))
		case "write":
			return fmt.Sprintf("write(%s, %s)", i.Key, show(i.Value))
		default:
			res := "?"
			if o.Known {
				res = fmt.Sprint(o.Ok)
			}
			return fmt.Sprintf("cas(%s, %s -> %s) -> %s", i.Key, show(i.Expected), show(i.Value), res)
		}
	},
	DescribeState: func(st interface{}) string {
		s := st.(state)
		if !s.Set {
			return "nil"
		}
		return fmt.Sprint(s.Value)
	},
}

type summary struct {
	Keys       int      `json:"keys"`
	Operations int      `json:"operations"`
	Unknown    int      `json:"indeterminate"`
	Result     string   `json:"result"`
	FailedKey  string   `json:"failed_key,omitempty"`
	History    []string `json:"failed_key_history,omitempty"`
}

func main() {
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	visualize := flag.String("visualize", "", "write an HTML visualization of a failure here")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: cairn-porcupine [-timeout D] [-visualize PATH] HISTORY.jsonl")
		os.Exit(2)
	}
	ops, unknown, err := read(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	keys := map[string]bool{}
	for _, op := range ops {
		keys[op.Input.(input).Key] = true
	}
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, *timeout)
	s := summary{Keys: len(keys), Operations: len(ops), Unknown: unknown, Result: string(res)}
	if res == porcupine.Illegal {
		// The smallest key history that fails on its own.
		var failed [][]porcupine.Operation
		for _, part := range registerModel.Partition(ops) {
			if porcupine.CheckOperationsTimeout(registerModel, part, *timeout) == porcupine.Illegal {
				failed = append(failed, part)
			}
		}
		sort.Slice(failed, func(a, b int) bool { return len(failed[a]) < len(failed[b]) })
		if len(failed) > 0 {
			part := failed[0]
			sort.Slice(part, func(a, b int) bool { return part[a].Call < part[b].Call })
			s.FailedKey = part[0].Input.(input).Key
			for _, op := range part {
				s.History = append(s.History, fmt.Sprintf("[%d, %d] process %d: %s", op.Call, op.Return, op.ClientId,
					registerModel.DescribeOperation(op.Input, op.Output)))
			}
		}
		if *visualize != "" {
			if err := porcupine.VisualizePath(registerModel, info, *visualize); err != nil {
				fmt.Fprintln(os.Stderr, "visualization:", err)
			}
		}
	}
	b, _ := json.Marshal(s)
	fmt.Println(string(b))
	switch res {
	case porcupine.Ok:
		os.Exit(0)
	case porcupine.Illegal:
		os.Exit(1)
	default:
		os.Exit(2)
	}
}

// read pairs each invoke with its process's next event.
func read(path string) ([]porcupine.Operation, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	pending := map[int]event{}
	var ops []porcupine.Operation
	var open []porcupine.Operation
	unknown := 0
	var last int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, 0, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		if e.Time > last {
			last = e.Time
		}
		if e.Type == "invoke" {
			if _, busy := pending[e.Process]; busy {
				return nil, 0, fmt.Errorf("%s:%d: process %d invokes twice", path, line, e.Process)
			}
			pending[e.Process] = e
			continue
		}
		inv, ok := pending[e.Process]
		if !ok {
			return nil, 0, fmt.Errorf("%s:%d: process %d completes nothing", path, line, e.Process)
		}
		delete(pending, e.Process)
		in := input{F: inv.F, Key: inv.Key, Value: inv.Value, Expected: inv.Expected}
		op := porcupine.Operation{ClientId: e.Process, Input: in, Call: inv.Time, Return: e.Time}
		switch e.Type {
		case "ok":
			op.Output = output{Known: true, Ok: true, Value: e.Value}
			ops = append(ops, op)
		case "fail":
			// Certainly no effect. Only a cas whose comparison failed says something
			// about the state; one that failed with an error compared nothing.
			if inv.F == "cas" && e.Error == "" {
				op.Output = output{Known: true, Ok: false}
				ops = append(ops, op)
			}
		case "info":
			// Unknown outcome: a write may take effect at any time after its call.
			if inv.F != "read" {
				unknown++
				op.Output = output{Known: false}
				open = append(open, op)
			}
		default:
			return nil, 0, fmt.Errorf("%s:%d: unknown event type %q", path, line, e.Type)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	// Unknown outcomes, and invocations never completed, end after everything else.
	for _, inv := range pending {
		if inv.F == "read" {
			continue
		}
		unknown++
		open = append(open, porcupine.Operation{ClientId: inv.Process,
			Input: input{F: inv.F, Key: inv.Key, Value: inv.Value, Expected: inv.Expected},
			Call:  inv.Time, Output: output{Known: false}})
	}
	for _, op := range open {
		op.Return = last + 1
		ops = append(ops, op)
	}
	return ops, unknown, nil
}
