-- AlterTable
ALTER TABLE "BudgetUsage" ADD COLUMN     "raisedMicros" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "raisedTokens" BIGINT NOT NULL DEFAULT 0;

-- CreateTable
CREATE TABLE "BudgetRefusal" (
    "budgetId" TEXT NOT NULL,
    "periodStart" TIMESTAMP(3) NOT NULL,
    "identityId" TEXT NOT NULL,
    "at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "BudgetRefusal_pkey" PRIMARY KEY ("budgetId","periodStart","identityId")
);

-- AddForeignKey
ALTER TABLE "BudgetRefusal" ADD CONSTRAINT "BudgetRefusal_budgetId_periodStart_fkey" FOREIGN KEY ("budgetId", "periodStart") REFERENCES "BudgetUsage"("budgetId", "periodStart") ON DELETE CASCADE ON UPDATE CASCADE;
