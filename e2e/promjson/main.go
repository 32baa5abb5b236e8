// Command promjson reads the JSON e2e/prometheus.sh needs, without jq, which
// a fresh Debian 12 does not have. It reads a document on standard input
// and prints one tab-separated line per item, newlines and runs of spaces
// in values made one space, an empty value "-":
//
//	promjson panels   # a Grafana dashboard: "panel <title> <refId> <expr>" and
//	                  # "variable <name> <type> <query>"; its schemaVersion on stderr
//	promjson rules    # Prometheus's /api/v1/rules: "<type> <name> <health> <lastError> <query>"
//	promjson alerts   # Prometheus's /api/v1/alerts: "<alertname> <state> <job> <zone>"
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// line prints fields tab-separated, each field's whitespace runs made one
// space and an empty field "-" (bash's read collapses empty fields
// between tabs).
func line(fields ...string) {
	for i, f := range fields {
		fields[i] = strings.Join(strings.Fields(f), " ")
		if fields[i] == "" {
			fields[i] = "-" // bash's read collapses empty fields between tabs
		}
	}
	fmt.Println(strings.Join(fields, "\t"))
}

func main() {
	var v map[string]any
	if err := json.NewDecoder(os.Stdin).Decode(&v); err != nil {
		fmt.Fprintln(os.Stderr, "jsonx:", err)
		os.Exit(1)
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	arr := func(x any) []map[string]any {
		var out []map[string]any
		a, _ := x.([]any)
		for _, e := range a {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	switch os.Args[1] {
	case "panels": // panel <title> <refId> <expr> | variable <name> <type> <query>
		fmt.Fprintf(os.Stderr, "schemaVersion %v\n", v["schemaVersion"])
		var walk func([]map[string]any)
		walk = func(ps []map[string]any) {
			for _, p := range ps {
				for _, t := range arr(p["targets"]) {
					line("panel", str(p, "title"), str(t, "refId"), str(t, "expr"))
				}
				walk(arr(p["panels"]))
			}
		}
		walk(arr(v["panels"]))
		tl, _ := v["templating"].(map[string]any)
		for _, t := range arr(tl["list"]) {
			q := str(t, "query")
			if qm, ok := t["query"].(map[string]any); ok {
				q = str(qm, "query")
			}
			line("variable", str(t, "name"), str(t, "type"), q)
		}
	case "rules": // <type> <name> <health> <lastError> <query>
		data, _ := v["data"].(map[string]any)
		for _, g := range arr(data["groups"]) {
			for _, r := range arr(g["rules"]) {
				line(str(r, "type"), str(r, "name"), str(r, "health"), str(r, "lastError"), str(r, "query"))
			}
		}
	case "alerts": // <alertname> <state> <job> <zone>
		data, _ := v["data"].(map[string]any)
		for _, a := range arr(data["alerts"]) {
			l, _ := a["labels"].(map[string]any)
			line(str(l, "alertname"), str(a, "state"), str(l, "job"), str(l, "zone"))
		}
	}
}
