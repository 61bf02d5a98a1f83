// Command unicore-cri is a minimal CRI client for the real node of unicore_devcluster (crictl's module,
// sigs.k8s.io/cri-tools, is not available from the Go module proxy). It uses k8s.io/cri-client, the kubelet's own
// CRI client, at the kubelet's version.
//
//	unicore-cri --endpoint unix:///run/x/containerd.sock pods            # one line per pod sandbox: id state ns/name
//	unicore-cri --endpoint ... ps                                        # one line per container: id state pod container
//	unicore-cri --endpoint ... stop CONTAINER_ID [TIMEOUT_SECONDS]       # stop one container (SIGTERM, SIGKILL after)
//	unicore-cri --endpoint ... remove-all                                # stop and remove every pod sandbox
//
// remove-all is the real node's tear-down: StopPodSandbox kills the containers and runs the CNI DEL (veth, IP
// release, the netns mount), RemovePodSandbox removes the containers and the sandbox.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

func main() {
	endpoint := flag.String("endpoint", "", "CRI endpoint, e.g. unix:///run/containerd/containerd.sock")
	timeout := flag.Duration("timeout", 60*time.Second, "overall timeout")
	flag.Parse()
	if *endpoint == "" || flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: unicore-cri --endpoint unix:///path.sock pods|ps|stop ID [SECONDS]|remove-all")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	svc, err := remote.NewRemoteRuntimeService(ctx, *endpoint, 10*time.Second, nil, false)
	if err != nil {
		fail(err)
	}
	args := flag.Args()
	switch args[0] {
	case "pods":
		pods, err := svc.ListPodSandbox(ctx, nil)
		if err != nil {
			fail(err)
		}
		for _, p := range pods {
			fmt.Printf("%s %s %s/%s\n", p.Id, p.State, p.Metadata.GetNamespace(), p.Metadata.GetName())
		}
	case "ps":
		ctrs, err := svc.ListContainers(ctx, nil)
		if err != nil {
			fail(err)
		}
		for _, c := range ctrs {
			fmt.Printf("%s %s %s %s\n", c.Id, c.State, c.PodSandboxId, c.Metadata.GetName())
		}
	case "stop":
		if len(args) < 2 {
			fail(fmt.Errorf("stop needs a container id"))
		}
		grace := int64(0)
		if len(args) > 2 {
			if grace, err = strconv.ParseInt(args[2], 10, 64); err != nil {
				fail(err)
			}
		}
		if err := svc.StopContainer(ctx, args[1], grace); err != nil {
			fail(err)
		}
	case "remove-all":
		pods, err := svc.ListPodSandbox(ctx, nil)
		if err != nil {
			fail(err)
		}
		failed := 0
		for _, p := range pods {
			if p.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				if err := svc.StopPodSandbox(ctx, p.Id); err != nil {
					fmt.Fprintf(os.Stderr, "stop sandbox %s: %v\n", p.Id, err)
				}
			}
			if err := svc.RemovePodSandbox(ctx, p.Id); err != nil {
				fmt.Fprintf(os.Stderr, "remove sandbox %s: %v\n", p.Id, err)
				failed++
			}
		}
		fmt.Printf("removed %d pod sandboxes\n", len(pods)-failed)
		if failed > 0 {
			os.Exit(1)
		}
	default:
		fail(fmt.Errorf("unknown command %q", args[0]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "unicore-cri:", err)
	os.Exit(1)
}
