/* The pod sandbox's "pause" process for swerl's local cluster (no registry to pull
 * registry.k8s.io/pause from here). It holds the pod's namespaces: it sleeps, reaps the
 * children that get reparented to it, and exits on SIGTERM or SIGINT. Built static by
 * scripts/ensure-k8s.sh. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && argv[1][0] == '-' && argv[1][1] == 'v') {
    puts("swerl-pause 1");
    return 0;
  }
  if (getpid() != 1) fputs("pause: not running as PID 1\n", stderr);
  struct sigaction term = {.sa_handler = quit};
  struct sigaction chld = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGTERM, &term, NULL) < 0 || sigaction(SIGINT, &term, NULL) < 0 ||
      sigaction(SIGCHLD, &chld, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) pause();
}
