//go:build tools

// Package tools names the command this module builds, so that `go mod tidy` keeps it.
package tools

import _ "go.etcd.io/etcd/server/v3"
