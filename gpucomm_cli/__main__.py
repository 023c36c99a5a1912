from gpucomm.app import main

main()
