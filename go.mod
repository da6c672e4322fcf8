module github.com/bub-bus/bub

go 1.26.8

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/gobwas/glob v1.1.0 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/sourcegraph/jsonrpc2 v0.2.3 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
