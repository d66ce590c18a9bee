// One binary for the Kubernetes components swerl's local cluster runs
// (built by scripts/ensure-k8s.sh against k8s.io/kubernetes from the Go
// module proxy). It picks the component by the name it was started as
// (a symlink named kubelet, say) or by its first argument:
//
//	kube kube-apiserver --etcd-servers=...
//	kube kubectl get pods
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones, as upstream's apiserver and controller-manager

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var components = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func runKubectl(args []string) {
	os.Args = append([]string{"kubectl"}, args...)
	logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
	if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	os.Exit(0)
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if _, ok := components[name]; !ok && name != "kubectl" && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	if name == "kubectl" {
		runKubectl(args)
	}
	newCommand, ok := components[name]
	if !ok {
		names := []string{"kubectl"}
		for n := range components {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: %s COMPONENT [flags...]\ncomponents: %v\n", filepath.Base(os.Args[0]), names)
		os.Exit(2)
	}
	os.Args = append([]string{name}, args...)
	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}
