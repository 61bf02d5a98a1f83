// unicore-exec: the workbench container's exec server (standard library only). See main.go and
// hack/build-exec-server.sh.
module unicore.dev/exec-server

go 1.26.0
