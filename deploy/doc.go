// Package deploy holds no Go code of jetembed: it is the home of the
// deployment files (Kubernetes manifests, NATS Helm values and accounts, the
// KEDA ScaledObject, the compose cluster, the Grafana dashboard) and of the
// tests that lint them. The tests parse every file, check the references
// between them (probe paths and ports, names, metric names), and run a real
// nats-server with accounts.conf to prove the permission model.
//
// It imports telemetry (the exposed metric names) in tests only.
package deploy
