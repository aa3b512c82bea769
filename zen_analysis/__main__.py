from zen_analysis.interface.cli import main

main()
