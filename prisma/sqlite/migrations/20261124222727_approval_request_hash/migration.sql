-- AlterTable
ALTER TABLE "Approval" ADD COLUMN "requestHash" TEXT;
