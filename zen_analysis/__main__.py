from zen_analysis.cli import main

main()
