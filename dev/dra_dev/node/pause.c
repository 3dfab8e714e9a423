/* The pod sandbox's process: holds the pod's namespaces open until the runtime stops it.
 *
 * Built statically by dra_dev.node.images into the local pause image (no registry here). It reaps
 * children it inherits as PID 1 of the pod's PID namespace and exits 0 on SIGINT or SIGTERM.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction sa = {0};
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = stop;
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        return 1;
    }
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
