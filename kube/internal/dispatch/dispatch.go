// Package dispatch chooses what a kiln-kube process runs from its command line, apart from the
// components' heavy imports so that it can be tested alone. A process runs one component:
//
//   - the one its program name stands for, when that is an upstream binary's name
//     (/usr/local/bin/kube-apiserver, a link to kiln-kube, runs kube-apiserver with every
//     argument), as kubeadm's static pods and systemd units call them;
//   - otherwise the one its first argument names (kiln-kube apiserver --flags...).
package dispatch

import "path/filepath"

// Choice is what to run.
type Choice struct {
	// Component is the component to run, as the command line names it (which may be no
	// component: kiln-kube --help); empty when it names none (kiln-kube alone).
	Component string
	// Args are os.Args as the component is to see them: its program name, then its
	// arguments. Called by an upstream name, the command line unchanged; as kiln-kube
	// COMPONENT, "kiln-kube COMPONENT" as the program name and the rest.
	Args []string
	// ByProgram says the program name chose the component.
	ByProgram bool
}

// Choose reads args (os.Args). programs maps an upstream binary's name to the component it
// runs (kube-apiserver: apiserver); a program name is compared without its directory.
func Choose(args []string, programs map[string]string) Choice {
	if len(args) == 0 {
		return Choice{}
	}
	if c, ok := programs[filepath.Base(args[0])]; ok {
		return Choice{Component: c, Args: args, ByProgram: true}
	}
	if len(args) < 2 {
		return Choice{Args: args}
	}
	return Choice{Component: args[1], Args: append([]string{args[0] + " " + args[1]}, args[2:]...)}
}
