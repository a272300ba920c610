/* MPI_Comm_spawn as MPI programs use it: the parents (every rank of MPI_COMM_WORLD, root 0)
 * spawn two copies of this program with argument "child"; parent rank r sends 100 + r to
 * child rank r over the intercommunicator, the child answers with the value plus 1000;
 * both sides disconnect. Prints "parent <rank> got <value>" and "child <rank> of <size>
 * got <value> from its parent". Run by tests/pmix_host.rs under maestro run and mpirun. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    int failures = 0;
    if (parent == MPI_COMM_NULL) {
        char *child_argv[] = {"child", NULL};
        MPI_Comm inter;
        int codes[2];
        int rc = MPI_Comm_spawn(argv[0], child_argv, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD,
                                &inter, codes);
        if (rc != MPI_SUCCESS) {
            printf("parent %d spawn failed %d\n", rank, rc);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        int remote = 0;
        MPI_Comm_remote_size(inter, &remote);
        if (rank < remote) {
            int v = 100 + rank, back = 0;
            MPI_Send(&v, 1, MPI_INT, rank, 7, inter);
            MPI_Recv(&back, 1, MPI_INT, rank, 8, inter, MPI_STATUS_IGNORE);
            printf("parent %d got %d\n", rank, back);
            failures += back != v + 1000;
        }
        MPI_Comm_disconnect(&inter);
    } else if (argc > 1 && strcmp(argv[1], "child") == 0) {
        int psize = 0, v = 0;
        MPI_Comm_remote_size(parent, &psize);
        if (rank < psize) {
            MPI_Recv(&v, 1, MPI_INT, rank, 7, parent, MPI_STATUS_IGNORE);
            printf("child %d of %d got %d from its parent\n", rank, size, v);
            v += 1000;
            MPI_Send(&v, 1, MPI_INT, rank, 8, parent);
        }
        MPI_Comm_disconnect(&parent);
    }
    fflush(stdout);
    MPI_Finalize();
    return failures;
}
